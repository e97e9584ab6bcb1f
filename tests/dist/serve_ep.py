"""serve_ep.py MPIRUN LYNX_MOE MODEL: `serve --expert-parallel` end to end on 2 ranks.

1. A greedy completion from the 2-rank server equals the single-process server's.
2. SIGTERM to rank 0 (the graceful stop) stops every rank: mpirun's exit status 0, in
   bounded time.
3. A rank killed while serving: the job ends non-zero in bounded time, and a request sent
   after the kill does not hang (it fails or gets an error status).
Exit status 0 when all hold."""
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

mpirun, binary, model = sys.argv[1:4]
LIMIT = 60  # seconds any phase may take


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def start(port, ep):
    cmd = [binary, "serve", "-m", model, "--port", str(port), "-t", "1", "--max-batch", "2"]
    if ep:
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2"] + cmd + [
            "--expert-parallel", "--ep-combine", "gather"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + LIMIT
    while time.time() < deadline:
        if proc.poll() is not None:
            fail(f"server exited early ({proc.returncode}): {proc.stderr.read().decode()}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return proc
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.2)
    proc.kill()
    fail("server did not come up")


def complete(port, timeout=LIMIT):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0,
                       "n": 2}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return [c["text"] for c in json.load(r)["choices"]]


def stop(proc, sig=signal.SIGTERM):
    os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
    try:
        return proc.wait(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        fail("did not stop within the limit")


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
    os.killpg(job.pid, signal.SIGKILL)
    fail(f"rank {rank} not found among {pids}")


port = random.randint(20000, 40000)
one = start(port, False)
want = complete(port)
if stop(one) != 0:
    fail("single-process server did not stop cleanly")

port += 1
ep = start(port, True)
got = complete(port)
if got != want:
    fail(f"EP texts {got!r} differ from the single process's {want!r}")
t0 = time.time()
os.kill(rank_pid(ep, 0), signal.SIGTERM)
try:
    rc = ep.wait(timeout=LIMIT)
except subprocess.TimeoutExpired:
    os.killpg(ep.pid, signal.SIGKILL)
    fail("SIGTERM to rank 0 did not stop the job")
if rc != 0:
    fail(f"EP server stopped with status {rc}: {ep.stderr.read().decode()[-2000:]}")
print(f"serve_ep: same texts {got!r}; SIGTERM to rank 0 stopped every rank in {time.time() - t0:.1f}s")

port += 1
ep = start(port, True)
victim = rank_pid(ep, 1)
t0 = time.time()
os.kill(victim, signal.SIGKILL)
try:
    complete(port, timeout=LIMIT)
    answered = "a completion"
except urllib.error.HTTPError as e:
    answered = f"HTTP {e.code}"
except (urllib.error.URLError, ConnectionError, OSError) as e:
    answered = f"no answer ({type(e).__name__})"
try:
    rc = ep.wait(timeout=LIMIT)
except subprocess.TimeoutExpired:
    os.killpg(ep.pid, signal.SIGKILL)
    fail("the job went on after a rank was killed")
if rc == 0:
    fail("the job exited 0 after a rank was killed")
print(f"serve_ep: rank 1 killed: request got {answered}; job ended with status {rc} "
      f"after {time.time() - t0:.1f}s")
