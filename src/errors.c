/*
 * errors.c - dq_strerror: the static text of each enum dq_error code.
 *
 * Short lowercase phrases meant to follow a colon ("offer: timed out"); the
 * detail of a particular failure lives in dq_client_errstr().
 */
#include "util.h"

const char *dq_strerror(int code)
{
    switch (code) {
    case DQ_OK: return "success";
    case DQ_EINVAL: return "invalid argument";
    case DQ_ETOOBIG: return "payload too large";
    case DQ_ECONNECT: return "cannot connect to Redis";
    case DQ_ETIMEDOUT: return "timed out";
    case DQ_EAUTH: return "authentication failed";
    case DQ_EWRONGTYPE: return "wrong key type in Redis";
    case DQ_EREDIS: return "Redis error";
    case DQ_EPROTO: return "protocol error";
    case DQ_ENOMEM: return "out of memory";
    case DQ_ECLOSED: return "closed";
    case DQ_EBUSY: return "busy";
    case DQ_ENOTDURABLE: return "not confirmed by enough replicas";
    case DQ_EKEY: return "sealed with a key this client does not hold";
    default: return "unknown error";
    }
}
