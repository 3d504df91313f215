"""Starts the real server binary on an ephemeral 127.0.0.1 port for the Python tests."""
import os
import signal
import subprocess
import tempfile
import time


def start_server(binary, *extra, port=0):
    """Returns (process, "127.0.0.1:PORT") once the server has written its port. `port`: that
    port (a server started again where another was), else any free one."""
    port_file = os.path.join(tempfile.mkdtemp(prefix="tc-py-"), "port")
    # More from the environment, as for the C++ suites ("--device_workers,--test_cpu_devices=2").
    more = [f for f in os.environ.get("TC_TEST_SERVER_FLAGS", "").split(",") if f]
    proc = subprocess.Popen([binary, "--address=127.0.0.1", f"--port={port}",
                             f"--port_file={port_file}", "--metrics_port=0", "--backend=cpu", *extra,
                             *more])
    deadline = time.time() + 30
    while not os.path.exists(port_file):
        if proc.poll() is not None:
            raise RuntimeError("server exited at start")
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    with open(port_file) as f:
        return proc, f"127.0.0.1:{int(f.read())}"


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


def wait_for(predicate, seconds=10.0):
    """Polls `predicate` until it holds or `seconds` pass; its last value."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
