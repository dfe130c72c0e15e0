/*
 * tls.c - TLS for a connection's socket, with OpenSSL: the one file that
 * includes OpenSSL's headers. It owns a client's TLS settings (an SSL_CTX:
 * the CA store, the client certificate, verification on or off) and, per
 * connection, an SSL bound to a non-blocking socket: the handshake, reads
 * and writes, each returning "would block" as a status the caller (link.c,
 * on the client's libev loop) waits on, never blocking itself.
 *
 * Verification is on unless the options ask for its insecure off switch:
 * the chain against the CA file (or the system's store), then the name
 * (the node's host, or tls_server_name): an IP address is matched against
 * the certificate's IP entries, a name against its DNS names, and a name
 * goes out as SNI too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "internal.h"

struct dq__tls_ctx {
    SSL_CTX *ctx;
    int verify;
    char server_name[256]; /* "" = each node's host                    */
};

struct dq__tls {
    SSL *ssl;
};

/* OpenSSL's oldest queued error as text into err, or fallback. Clears the
 * thread's error queue, so the next call starts clean. */
static void ssl_error(char *err, size_t errlen, const char *what, const char *fallback) {
    unsigned long e = ERR_get_error();
    char buf[200];
    if (e) ERR_error_string_n(e, buf, sizeof buf);
    const char *reason = e ? ERR_reason_error_string(e) : NULL;
    snprintf(err, errlen, "%s: %s", what, reason ? reason : e ? buf : fallback);
    ERR_clear_error();
}

int dq__tls_ctx_new(dq__tls_ctx **out, const dq_options *o, char *err, size_t errlen) {
    *out = NULL;
    if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
        snprintf(err, errlen,
                 "TLS: a client certificate needs both a certificate file and its key file");
        return DQ_EINVAL;
    }
    if (o->tls_server_name && strlen(o->tls_server_name) >= 256) {
        snprintf(err, errlen, "TLS: the server name is longer than 255 bytes");
        return DQ_EINVAL;
    }
    dq__tls_ctx *t = calloc(1, sizeof *t);
    if (!t) return DQ_ENOMEM;
    ERR_clear_error();
    t->ctx = SSL_CTX_new(TLS_client_method());
    t->verify = !o->tls_insecure_skip_verify;
    if (o->tls_server_name) snprintf(t->server_name, sizeof t->server_name, "%s", o->tls_server_name);
    int rc = 0;
    if (!t->ctx) {
        ssl_error(err, errlen, "TLS", "cannot make a context");
        rc = DQ_ENOMEM;
    } else if (o->tls_ca ? SSL_CTX_load_verify_locations(t->ctx, o->tls_ca, NULL) != 1
                         : SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        char what[300];
        snprintf(what, sizeof what, "TLS: cannot load the CA certificates %s%s",
                 o->tls_ca ? "from " : "of the system", o->tls_ca ? o->tls_ca : "");
        ssl_error(err, errlen, what, "unreadable");
        rc = DQ_EINVAL;
    } else if (o->tls_cert && SSL_CTX_use_certificate_chain_file(t->ctx, o->tls_cert) != 1) {
        char what[300];
        snprintf(what, sizeof what, "TLS: cannot load the client certificate %s", o->tls_cert);
        ssl_error(err, errlen, what, "unreadable");
        rc = DQ_EINVAL;
    } else if (o->tls_key && (SSL_CTX_use_PrivateKey_file(t->ctx, o->tls_key, SSL_FILETYPE_PEM) != 1 ||
                              SSL_CTX_check_private_key(t->ctx) != 1)) {
        char what[300];
        snprintf(what, sizeof what, "TLS: cannot use the client key %s", o->tls_key);
        ssl_error(err, errlen, what, "unreadable");
        rc = DQ_EINVAL;
    }
    if (rc) {
        dq__tls_ctx_free(t);
        return rc;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    /* Writes go from a buffer that grows (and moves) between retries. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    *out = t;
    return 0;
}

void dq__tls_ctx_free(dq__tls_ctx *t) {
    if (!t) return;
    SSL_CTX_free(t->ctx);
    free(t);
}

/* 1 if host is an IPv4 or IPv6 address. */
static int is_ip(const char *host) {
    unsigned char buf[16];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

dq__tls *dq__tls_new(dq__tls_ctx *t, int fd, const char *host, char *err, size_t errlen) {
    dq__tls *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ERR_clear_error();
    const char *name = t->server_name[0] ? t->server_name : host;
    s->ssl = SSL_new(t->ctx);
    int ok = s->ssl && SSL_set_fd(s->ssl, fd) == 1;
    if (ok && !is_ip(name)) ok = SSL_set_tlsext_host_name(s->ssl, name) == 1;
    if (ok && t->verify) {
        X509_VERIFY_PARAM *param = SSL_get0_param(s->ssl);
        ok = is_ip(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name) == 1
                         : SSL_set1_host(s->ssl, name) == 1;
    }
    if (!ok) {
        ssl_error(err, errlen, "TLS", "cannot set up the connection");
        dq__tls_free(s);
        return NULL;
    }
    SSL_set_connect_state(s->ssl);
    return s;
}

void dq__tls_free(dq__tls *s) {
    if (!s) return;
    SSL_free(s->ssl);
    free(s);
}

/* The status of a failed SSL call (rc), with the cause in err. */
static int status(dq__tls *s, int rc, char *err, size_t errlen) {
    int e = SSL_get_error(s->ssl, rc);
    switch (e) {
        case SSL_ERROR_WANT_READ: return DQ__TLS_WANT_READ;
        case SSL_ERROR_WANT_WRITE: return DQ__TLS_WANT_WRITE;
        case SSL_ERROR_ZERO_RETURN: snprintf(err, errlen, "closed by server"); return DQ__TLS_ERR;
        default: break;
    }
    long v = SSL_get_verify_result(s->ssl);
    if (v != X509_V_OK && !SSL_is_init_finished(s->ssl)) {
        int unknown_ca = v == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
                         v == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
                         v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
                         v == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE;
        snprintf(err, errlen, "TLS handshake failed: the server's certificate is not accepted: %s%s",
                 X509_verify_cert_error_string(v),
                 unknown_ca ? " (no CA trusted here signed it: --tls-ca FILE)" : "");
        ERR_clear_error();
        return DQ__TLS_ERR;
    }
    unsigned long code = ERR_peek_error();
    const char *hint = "";
    if (ERR_GET_REASON(code) == SSL_R_WRONG_VERSION_NUMBER ||
        ERR_GET_REASON(code) == SSL_R_PACKET_LENGTH_TOO_LONG)
        hint = " (the server does not speak TLS on this port: use redis:// for a plain port)";
    else if (ERR_GET_REASON(code) == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
             ERR_GET_REASON(code) == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE)
        hint = " (the server may require a client certificate: --tls-cert and --tls-key)";
    char what[160];
    snprintf(what, sizeof what, "TLS %s failed", SSL_is_init_finished(s->ssl) ? "session" : "handshake");
    if (!code && e == SSL_ERROR_SYSCALL) {
        snprintf(err, errlen, "%s: the server closed the connection%s", what,
                 SSL_is_init_finished(s->ssl) ? "" : " (not a TLS port? use redis:// for a plain port)");
        return DQ__TLS_ERR;
    }
    char base[DQ__ERRSTR_MAX];
    ssl_error(base, sizeof base, what, "error");
    snprintf(err, errlen, "%.180s%s", base, hint);
    return DQ__TLS_ERR;
}

int dq__tls_handshake(dq__tls *s, char *err, size_t errlen) {
    ERR_clear_error();
    int rc = SSL_do_handshake(s->ssl);
    return rc == 1 ? DQ__TLS_DONE : status(s, rc, err, errlen);
}

long dq__tls_read(dq__tls *s, void *buf, size_t len, int *st, char *err, size_t errlen) {
    ERR_clear_error();
    size_t n = 0;
    int rc = SSL_read_ex(s->ssl, buf, len, &n);
    if (rc == 1) return (long)n;
    *st = status(s, rc, err, errlen);
    return 0;
}

long dq__tls_write(dq__tls *s, const void *buf, size_t len, int *st, char *err, size_t errlen) {
    ERR_clear_error();
    size_t n = 0;
    int rc = SSL_write_ex(s->ssl, buf, len, &n);
    if (rc == 1) return (long)n;
    *st = status(s, rc, err, errlen);
    return 0;
}
