"""batch_promises.py - offer --batch keeps its promises at its chunks'
edges (docs/cli.md, Batches): each chunk of CHUNK (16,384) lines is
checked whole before it is sent, and nothing after a failed chunk is sent.

- a bad line in the second chunk (line 1.5 CHUNK of 3 CHUNK): the first
  chunk is offered, then the error is reported; exit 2, count CHUNK, the
  messages in that order, Redis holds exactly lines 1 to CHUNK;
- a chunk that Redis refuses (a due time past DQ_DUE_MAX_MS by the server's
  clock, which the CLI's check by its own clock let through): the chunk
  after it is never sent, and a bad line in that chunk is never reported;
- a line begun at a chunk's end goes whole into the next chunk: lines of
  1 MiB split across reads and chunks (chunks ended by count and by bytes,
  a last line without "\\n"), from a file and through a pipe, arrive byte
  for byte;
- a producer that writes a line every 0.3 s has each one offered within
  about 1 s of writing it;
- a chunk refused while stdin stays open and idle: delayq exits at once,
  it does not wait for the producer to write or close.
(Written with a reader thread that read ahead, on branch parseahead, which
was not merged; the promises are the ones main keeps.)"""
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.environ.get("DQ_TEST_LIB", os.path.join(os.path.dirname(__file__), "..", "..", "lib")))
from dqtest import *  # noqa: E402,F403

DUE_MAX_MS = 4398046511103  # include/delayq.h DQ_DUE_MAX_MS
CHUNK = 16384  # src/cli/cli.h BATCH_CHUNK_ITEMS: the lines of a chunk


def good(i, tag="p"):
    return b"0\tl%d\t%s %d\n" % (i, tag.encode(), i)


def take_ids(queue, n):
    """Takes n items of queue (all ready: delay 0); returns their ids, and
    checks that nothing else is left."""
    ids = []
    if n:
        r = dq("take", queue, "--count", n, "--json", "--timeout", "10s", timeout=60)
        ids = [m["id"] for m in r.json_lines()]
    p = stats(queue)
    if p is not None:
        eq((p["pending"], p["ready"]), (0, 0), f"{queue}: nothing else was offered")
    return ids


def lines_ids(first, last):
    return [f"l{i}" for i in range(first, last + 1)]


def batch_file(directory, name, data):
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


TMP = tempfile.TemporaryDirectory()

section("a bad line in the second chunk: the first is sent, then the error is reported")
BAD = CHUNK + CHUNK // 2
data = b"".join(good(i) if i != BAD else b"0\tbad id\tx\n" for i in range(1, 3 * CHUNK + 1))
r = dq("offer", "ab", "--batch", batch_file(TMP.name, "bad2.tsv", data), timeout=60)
eq((r.rc, r.out), (2, b"%d\n" % CHUNK), f"exit 2, stdout {CHUNK}")
errs = r.err.splitlines()
ok(len(errs) == 2 and b"line %d:" % BAD in errs[0] and b"bad id" in errs[0],
   f"stderr: first the bad line (line {BAD}, its id)", r.err)
UP_TO = b"offered before: %d items, every line up to line %d" % (CHUNK, CHUNK)
ok(len(errs) == 2 and UP_TO in errs[1], f"stderr: then what was offered, {CHUNK} items up to line {CHUNK}", r.err)
eq(sorted(take_ids("ab", CHUNK)), sorted(lines_ids(1, CHUNK)), f"Redis held exactly lines 1 to {CHUNK}")


def refused_chunk(queue, bad_at):
    """A 3 CHUNK-line file whose line CHUNK + 1 has a due time that the CLI's check
    lets through but the server's refuses: its delay is DQ_DUE_MAX_MS - T,
    T past the CLI's start (its check uses its clock at the start) and
    before Redis runs the chunk (CLIENT PAUSE holds every command until
    then). bad_at: a bad line's number, or 0. Returns the Result."""
    t_ms = int(time.time() * 1000) + 500
    lines = []
    for i in range(1, 3 * CHUNK + 1):
        if i == CHUNK + 1:
            lines.append(b"%d\tl%d\tfar\n" % (DUE_MAX_MS - t_ms, i))
        elif i == bad_at:
            lines.append(b"0\tbad id\tx\n")
        else:
            lines.append(good(i))
    path = batch_file(TMP.name, queue + ".tsv", b"".join(lines))
    redis("CLIENT", "PAUSE", "1000", "ALL")
    r = dq("offer", queue, "--batch", path, timeout=60)
    ok(time.time() * 1000 > t_ms, f"{queue}: delayq ran past T (its Redis calls after it)")
    return r


section("chunk 2 refused by Redis: chunk 3 is not sent")
r = refused_chunk("ar", 0)
eq(r.rc, 2, "exit 2 (the script refused an input)")
ok(b"line %d:" % (CHUNK + 1) in r.err and b"due time beyond" in r.err, f"stderr names line {CHUNK + 1} and why",
   r.err)
ok(UP_TO in r.err, f"stderr: {CHUNK} items up to line {CHUNK}", r.err)
n = int(r.out) if r.out.strip().isdigit() else -1
ok(CHUNK <= n < 2 * CHUNK, f"stdout {n}: chunk 1 and at most the rest of chunk 2", r.out)
ids = take_ids("ar", max(n, 0))
eq(len(ids), n, "Redis holds as many items as stdout says")
ok(set(lines_ids(1, CHUNK)) <= set(ids), "every line of chunk 1 was offered")
ok(f"l{CHUNK + 1}" not in ids, f"line {CHUNK + 1} was not")
eq(sorted(i for i in ids if int(i[1:]) > 2 * CHUNK), [], "nothing of chunk 3 was offered")

section("chunk 2 refused by Redis: a bad line in chunk 3 is never reported")
BAD3 = 2 * CHUNK + CHUNK // 2
r = refused_chunk("ah", BAD3)
eq(r.rc, 2, "exit 2")
ok(b"line %d:" % (CHUNK + 1) in r.err and b"line %d" % BAD3 not in r.err and b"bad id" not in r.err,
   f"stderr names line {CHUNK + 1}, not the bad line {BAD3} of the chunk after it", r.err)
eq(len(r.err.splitlines()), 2, "two lines on stderr: line 1001's refusal and what was offered")
n = int(r.out) if r.out.strip().isdigit() else -1
ids = take_ids("ah", max(n, 0))
eq(sorted(i for i in ids if int(i[1:]) > 2 * CHUNK), [], "nothing of chunk 3 was offered")

section("a line begun at a chunk's end goes whole into the next chunk")
MIB = 1024 * 1024


def carry_lines():
    """CHUNK - 1 small lines, one of 300 kB (across reads, ends chunk 1), ones of
    1,000,000 bytes (a chunk ends by bytes, the next line begun), small ones
    and a last line without "\\n". Returns (bytes, {id: sha256 of payload})."""
    out, want = [], {}

    def add(i, payload, nl=b"\n"):
        out.append(b"0\tc%d\t%s%s" % (i, payload, nl))
        want[f"c{i}"] = hashlib.sha256(payload).hexdigest()

    for i in range(1, CHUNK):
        add(i, (b"s%d\tx " % i) * (i % 37))
    add(CHUNK, bytes(range(33, 127)) * 3200)
    for i in range(CHUNK + 1, CHUNK + 8):
        add(i, (b"%d-" % i) * (1000000 // len(b"%d-" % i)))
    for i in range(CHUNK + 8, CHUNK + 500):
        add(i, b"t%d" % i)
    add(CHUNK + 500, b"last\tline", nl=b"")
    return b"".join(out), want


data, want = carry_lines()
path = batch_file(TMP.name, "carry.tsv", data)


def check_carry(queue, r):
    eq((r.rc, r.out), (0, b"%d\n" % len(want)), f"{queue}: exit 0, every line counted", )
    t = dq("take", queue, "--count", len(want), "--json", "--timeout", "10s", timeout=60)
    got = {m["id"]: hashlib.sha256(m["payload"].encode()).hexdigest() for m in t.json_lines()}
    bad = sorted(k for k in want if got.get(k) != want[k])
    ok(not bad and len(got) == len(want), f"{queue}: every payload arrived byte for byte", bad[:10])


check_carry("ac", dq("offer", "ac", "--batch", path, timeout=60))


def piped(queue, gen, t_max=60):
    """offer QUEUE --batch - fed by gen's byte strings (each written and
    flushed, then the generator resumes: it may sleep). Returns (rc, out,
    err, the Popen, seconds)."""
    p = subprocess.Popen([BIN, "--redis", URL, "offer", queue, "--batch", "-"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = [], []
    readers = [threading.Thread(target=lambda: out.append(p.stdout.read()), daemon=True),
               threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)]
    for t in readers:
        t.start()
    t0 = time.monotonic()
    try:
        for piece in gen(p):
            p.stdin.write(piece)
            p.stdin.flush()
    except (BrokenPipeError, OSError):
        pass
    try:
        p.stdin.close()
    except OSError:
        pass
    try:
        p.wait(t_max * SLOW)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    secs = time.monotonic() - t0
    for t in readers:
        t.join(10)
    return p.returncode, b"".join(out), b"".join(err), secs


def in_pieces(p):
    for k in range(0, len(data), 200000):  # reads and chunks end anywhere
        yield data[k:k + 200000]


rc, out, err, secs = piped("acp", in_pieces)
check_carry("acp", Result(["offer"], rc, out, err, secs))

section("a line every 0.3 s: each offered within about 1 s")
delays = []


def slow_writer(p):
    for i in range(1, 6):
        yield b"1h\tw%d\tslow %d\n" % (i, i)
        t = time.monotonic()
        seen = wait_for(lambda: (stats("aw") or {}).get("pending", 0) >= i, 3)
        delays.append(time.monotonic() - t if seen else None)
        time.sleep(0.3)


rc, out, err, secs = piped("aw", slow_writer)
eq((rc, out), (0, b"5\n"), "exit 0, 5 items")
note(f"seconds from writing each line to seeing it pending: {delays}")
ok(all(d is not None and d < 1.0 * SLOW for d in delays), "each line offered within 1 s of being written", delays)

section("a chunk refused while stdin stays open and idle: delayq exits at once")
timing = {}


def refused_then_idle(p):
    yield b"".join(good(i) for i in range(1, 11))
    wait_for(lambda: (stats("ai") or {}).get("ready", 0) >= 10, 5)  # delayq started long ago
    t_ms = int(time.time() * 1000)
    # Redis holds line 11's chunk for 0.5 s; stdin stays open meanwhile
    # and after: delayq must stop on the refusal, not wait for more input.
    redis("CLIENT", "PAUSE", "500", "ALL")
    yield b"%d\tfar\tx\n" % (DUE_MAX_MS - t_ms)
    timing["written"] = time.monotonic()
    # The pipe stays open and idle for up to 10 s, unless delayq exits.
    end = time.monotonic() + 10
    while p.poll() is None and time.monotonic() < end:
        time.sleep(0.02)
    timing["exited"] = time.monotonic()


rc, out, err, secs = piped("ai", refused_then_idle)
eq((rc, out), (2, b"10\n"), "exit 2, 10 items offered")
ok(b"line 11:" in err and b"due time beyond" in err, "stderr names line 11 and why", err)
gap = timing.get("exited", 1e9) - timing.get("written", 0)
ok(gap < 2.5 * SLOW, f"exited {gap:.2f} s after the refused line (0.5 s of it paused), stdin still open")
eq(sorted(take_ids("ai", 10)), sorted(lines_ids(1, 10)), "Redis held exactly lines 1 to 10")

TMP.cleanup()
finish()
