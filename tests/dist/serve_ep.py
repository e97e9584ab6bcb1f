"""serve_ep.py MPIRUN LYNX_MOE MODEL MODE: `serve --expert-parallel` end to end on 2 ranks.

MODE equal:
  1. A greedy completion from the 2-rank server equals the single-process server's.
  2. /metrics has the per-rank lines (rank="0", rank="1"), and they add up: the ranks' routed
     assignments sum to those the engine computed (lynx_expert_assignments_total), each
     rank streamed expert bytes, the busiest rank's share lies in [1/2, 1].
  3. SIGTERM to rank 0 (the graceful stop) stops every rank: mpirun's exit status 0.
MODE killed: rank 1 SIGKILLed while a long request is in flight: that request is answered
  503 with a JSON error, or loses its connection (OpenMPI kills rank 0 one second after it
  told it to stop); a request sent afterwards too; the job ends non-zero.
MODE hung: rank 1 SIGSTOPped while a long request is in flight (--ep-timeout 3): that request
  is answered 503 with a JSON error naming the timeout, /health answers 503 "failed", and the
  job ends non-zero (rank 0's MPI_Abort also ends the stopped rank).
No phase may take longer than LIMIT seconds (a hang fails the test; ctest's TIMEOUT is the
backstop). Exit status 0 when all hold."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

mpirun, binary, model, mode = sys.argv[1:5]
LIMIT = 60  # seconds any phase may take
jobs = []


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    for j in jobs:
        if j.poll() is None:
            try:
                os.killpg(j.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    sys.exit(1)


def start(ep, extra=(), batch=2):
    """The server on an ephemeral port (--port 0; a fixed or random port can collide with a
    test running beside this one). Returns (job, port), the port read from its log line
    "listening on http://HOST:PORT". A thread drains stderr into job.log (a list of lines) so
    that a chatty job never blocks on a full pipe."""
    cmd = [binary, "serve", "-m", model, "--port", "0", "-t", "1", "--max-batch", str(batch)]
    if ep:
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2"] + cmd + [
            "--expert-parallel", "--ep-combine", "gather"] + list(extra)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    proc.log = []
    proc.reader = threading.Thread(target=drain, args=(proc,), daemon=True)
    proc.reader.start()
    jobs.append(proc)
    deadline = time.time() + LIMIT
    port = None
    while time.time() < deadline:
        if proc.poll() is not None:
            fail(f"server exited early ({proc.returncode}): {log_of(proc)}")
        if port is None:
            m = re.search(rb"listening on http://[^\s:]+:(\d+)", b"".join(proc.log))
            port = int(m.group(1)) if m else None
        if port is not None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                return proc, port
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
        time.sleep(0.2)
    fail(f"server did not come up: {log_of(proc)}")


def drain(proc):
    for line in iter(proc.stderr.readline, b""):
        proc.log.append(line)


def log_of(proc):
    """What the job wrote to stderr; all of it once the job has ended."""
    if proc.poll() is not None:
        proc.reader.join(LIMIT)
    return b"".join(proc.log).decode(errors="replace")


def post(port, body, timeout=LIMIT):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def complete(port):
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "n": 2}
    return [c["text"] for c in post(port, body)["choices"]]


def outcome(fn):
    """('ok', value) | ('http', status, json body or text) | ('conn', exception name)."""
    try:
        return ("ok", fn())
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        try:
            return ("http", e.code, json.loads(text))
        except ValueError:
            return ("http", e.code, text)
    except (urllib.error.URLError, ConnectionError, OSError) as e:
        return ("conn", type(e).__name__)


def wait_job(job, what):
    try:
        return job.wait(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        fail(f"{what}: the job did not end within {LIMIT}s")


def rank_pid(job, rank):
    """The process id of `rank` of the mpirun job `job` (from its environment)."""
    pids = subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True,
                          text=True).stdout.split()
    for pid in pids:
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    fail(f"rank {rank} not found among {pids}")


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=LIMIT).read()
    out = {}
    for line in text.decode().splitlines():
        m = re.match(r'^(\w+)(\{[^}]*\})? (\S+)$', line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def check_metrics(port):
    # A request's last token reaches the client while the engine thread finishes its step: the
    # ranks' counters (read live from the executor) already hold that step, the engine's
    # routing counters are added just after sched.step() returns. So a scrape right after a
    # response may see one step between the two; read again (up to 2 s) until they agree.
    for _ in range(20):
        m = metrics(port)
        routed = sum(v for (name, labels), v in m.items()
                     if name == "lynx_ep_rank_routed_tokens_total")
        assignments = sum(v for (name, _), v in m.items()
                          if name == "lynx_expert_assignments_total")
        if routed == assignments:
            break
        time.sleep(0.1)
    per_rank = {}
    for (name, labels), v in m.items():
        r = re.search(r'rank="(\d+)"', labels)
        if name.startswith("lynx_ep_rank_") and r:
            per_rank.setdefault(name, {})[int(r.group(1))] = v
    for name in ["lynx_ep_rank_routed_tokens_total", "lynx_ep_rank_local_experts_total",
                 "lynx_ep_rank_expert_bytes_total", "lynx_ep_rank_received_bytes_total",
                 "lynx_ep_rank_compute_seconds_total", "lynx_ep_rank_comm_seconds_total"]:
        if sorted(per_rank.get(name, {})) != [0, 1]:
            fail(f"/metrics: {name} should have rank=\"0\" and rank=\"1\": {per_rank.get(name)}")
    routed = sum(per_rank["lynx_ep_rank_routed_tokens_total"].values())
    assignments = sum(v for (name, _), v in m.items()
                      if name == "lynx_expert_assignments_total")
    if routed != assignments or routed <= 0:
        fail(f"/metrics: the ranks' routed assignments sum to {routed}, the engine routed "
             f"{assignments}")
    for r, b in per_rank["lynx_ep_rank_expert_bytes_total"].items():
        if b <= 0:
            fail(f"/metrics: rank {r} streamed no expert bytes")
    share = m.get(("lynx_ep_busiest_rank_share", ""))
    if share is None or not 0.5 <= share <= 1:
        fail(f"/metrics: lynx_ep_busiest_rank_share {share} not in [0.5, 1]")
    if m.get(("lynx_ep_ranks", "")) != 2:
        fail("/metrics: lynx_ep_ranks is not 2")
    return routed, share


def long_request(port, results):
    """A request that runs for many steps, in the background: 8 choices of 240 tokens (near
    the 256-token context) on the one slot of a --max-batch 1 server are about 1920 steps
    (480 steps on 2 slots finished before the fault on a fast CI machine)."""
    body = {"prompt": "Once upon a time", "max_tokens": 240, "ignore_eos": True, "n": 8}
    t = threading.Thread(target=lambda: results.append(outcome(lambda: post(port, body))))
    t.start()
    # In flight once the engine runs it (its first tokens are out).
    deadline = time.time() + LIMIT
    while time.time() < deadline and not results:
        if metrics(port).get(("lynx_requests_running", ""), 0) >= 1:
            return t
        time.sleep(0.05)
    fail(f"the long request did not start running: {results}")


if mode == "equal":
    one, port = start(False)
    want = complete(port)
    one.send_signal(signal.SIGTERM)
    if wait_job(one, "single process") != 0:
        fail("single-process server did not stop cleanly")
    ep, port = start(True)
    got = complete(port)
    if got != want:
        fail(f"EP texts {got!r} differ from the single process's {want!r}")
    routed, share = check_metrics(port)
    t0 = time.time()
    os.kill(rank_pid(ep, 0), signal.SIGTERM)
    rc = wait_job(ep, "SIGTERM to rank 0")
    if rc != 0:
        fail(f"EP server stopped with status {rc}: {log_of(ep)[-2000:]}")
    print(f"serve_ep: same texts {got!r}; /metrics: {routed:.0f} assignments over 2 ranks, "
          f"busiest share {share:.3f}; SIGTERM to rank 0 stopped every rank in "
          f"{time.time() - t0:.1f}s")
elif mode in ("killed", "hung"):
    extra = ["--ep-timeout", "3"] if mode == "hung" else []
    ep, port = start(True, extra, batch=1)
    victim = rank_pid(ep, 1)
    results = []
    t = long_request(port, results)
    t0 = time.time()
    os.kill(victim, signal.SIGKILL if mode == "killed" else signal.SIGSTOP)
    if mode == "hung" and results:
        # It ended before the signal landed (a very fast machine): the rank is stopped now,
        # so a request sent now is in flight when the engine waits on it.
        results = []
        t = long_request(port, results)
    t.join(LIMIT)
    if t.is_alive():
        fail(f"{mode}: the request in flight got no answer within {LIMIT}s")
    inflight = results[0]
    after = outcome(lambda: post(port, {"prompt": "Once", "max_tokens": 4}))
    health = outcome(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/health",
                                                    timeout=LIMIT).read())
    rc = wait_job(ep, mode)
    err = log_of(ep)
    if mode == "hung":
        # Rank 0 decides alone, so the answer must be a 503 with the reason.
        if inflight[0] != "http" or inflight[1] != 503 or "ep-timeout" not in json.dumps(
                inflight[2]):
            fail(f"hung: the request in flight got {inflight}, not a 503 naming --ep-timeout")
        if after[0] == "ok" or (after[0] == "http" and after[1] != 503):
            fail(f"hung: a request after the failure got {after}")
        if health[0] == "ok" or (health[0] == "http" and health[1] != 503):
            fail(f"hung: /health after the failure got {health}")
    else:
        for what, o in (("in flight", inflight), ("after", after)):
            if o[0] == "ok" or (o[0] == "http" and o[1] != 503):
                fail(f"killed: the request {what} got {o}, not a 503 or a lost connection")
    if rc == 0:
        fail(f"{mode}: the job exited 0 after rank 1 {mode}: {err[-2000:]}")
    short = lambda o: o[:2] if o[0] == "http" else o
    print(f"serve_ep: rank 1 {mode}: in flight {short(inflight)}, after {short(after)}, "
          f"/health {short(health)}; job ended with status {rc} after "
          f"{time.time() - t0:.1f}s")
    if inflight[0] == "http":
        print(f"serve_ep: the in-flight answer: {json.dumps(inflight[2])}")
    print("serve_ep: the job's log:\n" + err[-3000:])
else:
    fail(f"unknown mode {mode}")
