"""The binding and the interpreter: Ctrl-C reaches a Python loop over ag's ops, long ops release the
GIL so that other Python threads (a notebook's) go on, and memory stays flat over many steps."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import ag

PYTHON = sys.executable


def run_child(code):
    """Starts `code` in a new interpreter that imports ag from the same place as this one."""
    return subprocess.Popen(
        [PYTHON, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def test_ctrl_c_reaches_a_long_python_loop():
    child = run_child(
        """
        import ag
        a = ag.randn(200, 200)
        print("looping", flush=True)
        while True:
            a = ag.matmul(a, a).tanh()
        """
    )
    try:
        assert child.stdout.readline().strip() == "looping"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert "KeyboardInterrupt" in err, err
    assert child.returncode != 0


def test_a_long_op_lets_other_python_threads_run():
    """While one thread is inside a long product, with the GIL released, the main thread keeps
    running Python: its clock readings fall inside the product's interval. Were the GIL held, no
    Python code could run between the call's start and its end."""
    ag.set_num_threads(1)
    a = ag.randn(2000, 2000)
    interval = {}

    def multiply():
        interval["start"] = time.perf_counter()
        ag.matmul(a, a)
        interval["end"] = time.perf_counter()

    worker = threading.Thread(target=multiply)
    readings = []
    worker.start()
    while worker.is_alive():
        readings.append(time.perf_counter())
        time.sleep(0)  # lets the worker take the GIL to start and to finish
    worker.join()
    start, end = interval["start"], interval["end"]
    margin = 0.2 * (end - start)  # away from the ends, where the worker runs Python
    inside = [t for t in readings if start + margin < t < end - margin]
    assert inside, f"no Python ran during the {end - start:.3f} s product"


def test_memory_stays_flat_over_ten_thousand_steps():
    """10,000 steps of a small model trained from Python: the resident memory after the last is
    within 5 % of what it was after the first thousand (a leak of a tensor or a Python object per
    step would grow it by megabytes)."""
    child = run_child(
        """
        import ag

        def rss_kib():
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])

        ag.manual_seed(0)
        model = ag.nn.Sequential(ag.nn.Linear(16, 32), ag.nn.ReLU(), ag.nn.Linear(32, 4))
        optimizer = ag.optim.Adam(model.parameters(), lr=1e-3)
        x, y = ag.randn(8, 16), ag.randint(0, 4, (8,))
        for step in range(10_000):
            loss = ag.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step == 999:
                warm = rss_kib()
        print(warm, rss_kib())
        """
    )
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    warm, last = map(int, out.split())
    assert last <= 1.05 * warm, f"RSS grew from {warm} KiB to {last} KiB"
