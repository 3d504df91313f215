"""nginx with tensorcompute.conf beside this file, its upstreams and listening port rewritten:
for the tests and benchmarks that put a balancer in front of replicas on loopback."""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

CONF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensorcompute.conf")


def find_nginx():
    """nginx's path, or None where it is not installed."""
    path = shutil.which("nginx") or "/usr/sbin/nginx"
    return path if os.path.exists(path) else None


def start(nginx, replicas):
    """nginx balancing over `replicas` ("host:port" each) on a free 127.0.0.1 port: (process,
    target, prefix directory). stop() ends it."""
    with open(CONF) as f:
        conf = f.read()
    upstream = "".join(f"        server {r} max_fails=1 fail_timeout=1s;\n" for r in replicas)
    conf, n = re.subn(r"(upstream tensorcompute \{\n(?:.*\n)*?)((?:\s*server .*\n)+)",
                      lambda m: m.group(1).rstrip(" ") + upstream.lstrip("\n"), conf, count=1)
    assert n == 1, "no upstream block in the nginx file"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = conf.replace("listen 127.0.0.1:50050", f"listen 127.0.0.1:{port}")
    prefix = tempfile.mkdtemp(prefix="tc-nginx-")
    os.chmod(prefix, 0o755)  # nginx's workers (nobody, under root) keep their buffers there
    path = os.path.join(prefix, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    with open(os.path.join(prefix, "stderr"), "w") as log:
        proc = subprocess.Popen([nginx, "-p", prefix, "-c", path], stdout=log, stderr=log,
                                start_new_session=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"127.0.0.1:{port}", prefix
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    with open(os.path.join(prefix, "stderr")) as f:
        raise RuntimeError("nginx did not start: " + f.read()[-2000:])


def stop(proc, prefix):
    proc.send_signal(signal.SIGQUIT)
    proc.wait(10)
    shutil.rmtree(prefix, True)
