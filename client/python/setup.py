"""Builds the package: the gRPC stubs generated from the repository's proto (protoc and
grpc_python_plugin: Debian's protobuf-compiler and protobuf-compiler-grpc), so the package
always speaks the contract it was built from, and libtensorcompute_native, the C++ client
library the package moves large tensors with (CMake, a C++17 compiler and gRPC's development
files: Debian's cmake, g++ and libgrpc++-dev).

    python3 -m venv --system-site-packages ~/tc
    ~/tc/bin/pip install --no-build-isolation client/python

TENSORCOMPUTE_NATIVE_BUILD: "auto" (default) installs without the library where it cannot be
built, and the client then says so when it starts; "1" makes that an install error; "0" skips
the library.
"""
import fcntl
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
PROTO_ROOT = os.path.join(REPO, "proto")
PROTO = "tensorcompute/v1/tensor_service.proto"
OUT = os.path.join(HERE, "tensorcompute_client", "v1")
NATIVE = os.path.join(HERE, "native")
# What the native library is built from, relative to the repository root; an sdist carries a
# copy under native/src (with gRPC's health.proto under native/src/grpc-proto).
NATIVE_SOURCES = ["client/native.cc", "client/native.map", "client/client.cc", "client/client.h",
                  "client/chunked_call.cc", "client/chunked_call.h", "client/replicas.cc",
                  "client/replicas.h", "util/fd_passing.cc", "util/fd_passing.h",
                  "proto/chunk_wire.cc",
                  "proto/chunk_wire.h", "proto/" + PROTO]
GRPC_PROTO_DIR = os.environ.get("TC_GRPC_PROTO_DIR", "/usr/share/grpc-proto")
HEALTH_PROTO = "grpc/health/v1/health.proto"
# Written into the package when the library was not built: the reason, which the client
# repeats in its warning.
NOT_BUILT = "_native_not_built.txt"


def generate():
    src = os.path.join(PROTO_ROOT, PROTO)
    if not os.path.exists(src):
        if os.path.exists(os.path.join(OUT, "tensor_service_pb2.py")):
            return  # An sdist that already carries the generated modules.
        raise SystemExit(f"cannot find {src}: build from a checkout of the repository")
    plugin = shutil.which("grpc_python_plugin")
    if shutil.which("protoc") is None or plugin is None:
        raise SystemExit("protoc and grpc_python_plugin are needed "
                         "(apt-get install protobuf-compiler protobuf-compiler-grpc)")
    tmp = os.path.join(HERE, "build", "gen")
    os.makedirs(tmp, exist_ok=True)
    subprocess.check_call(["protoc", f"-I{PROTO_ROOT}", f"--python_out={tmp}",
                           f"--grpcpy_out={tmp}", f"--plugin=protoc-gen-grpcpy={plugin}", src])
    os.makedirs(OUT, exist_ok=True)
    gen = os.path.join(tmp, "tensorcompute", "v1")
    for name in ("tensor_service_pb2.py", "tensor_service_pb2_grpc.py"):
        with open(os.path.join(gen, name)) as f:
            code = f.read()
        # The generated service module imports its messages by their proto package path.
        code = code.replace("from tensorcompute.v1 import tensor_service_pb2",
                            "from tensorcompute_client.v1 import tensor_service_pb2")
        with open(os.path.join(OUT, name), "w") as f:
            f.write(code)
    open(os.path.join(OUT, "__init__.py"), "a").close()


def native_sources():
    """(source root, directory of grpc/health/v1/health.proto): the repository, or the copy an
    sdist carries; None where neither is there."""
    if all(os.path.exists(os.path.join(REPO, p)) for p in NATIVE_SOURCES):
        return REPO, GRPC_PROTO_DIR
    staged = os.path.join(NATIVE, "src")
    if all(os.path.exists(os.path.join(staged, p)) for p in NATIVE_SOURCES):
        return staged, os.path.join(staged, "grpc-proto")
    return None


def build_native():
    """Builds libtensorcompute_native.so; returns (its path, None) or (None, why not)."""
    sources = native_sources()
    if sources is None:
        return None, "its C++ sources are not in this source tree"
    root, grpc_proto = sources
    if not os.path.exists(os.path.join(grpc_proto, HEALTH_PROTO)):
        return None, (f"{grpc_proto}/{HEALTH_PROTO} is missing (apt-get install grpc-proto, "
                      "or set TC_GRPC_PROTO_DIR)")
    for tool, pkg in (("cmake", "cmake"), ("c++", "g++")):
        if shutil.which(tool) is None:
            return None, f"{tool} is not installed (apt-get install {pkg})"
    # In the source tree, so that installing again rebuilds only what changed; one build at a
    # time (two installs from one checkout may run at once).
    build = os.path.join(HERE, "build", "native")
    os.makedirs(build, exist_ok=True)
    log_path = os.path.join(build, "build.log")
    with open(os.path.join(HERE, "build", "native.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        configure = ["cmake", "-S", NATIVE, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DTC_SOURCE_DIR={root}", f"-DTC_GRPC_PROTO_DIR={grpc_proto}"]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build, "Makefile")):
            configure += ["-G", "Ninja"]
        steps = [configure, ["cmake", "--build", build, "-j", str(os.cpu_count() or 1)]]
        with open(log_path, "w") as log:
            for cmd in steps:
                if subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT) != 0:
                    with open(log_path) as f:
                        tail = f.read().strip().splitlines()[-15:]
                    why = "the CMake build failed"
                    if any("gRPC" in line or "Protobuf" in line for line in tail):
                        why += " (gRPC's development files: apt-get install libgrpc++-dev " \
                               "protobuf-compiler-grpc)"
                    return None, why + f"; {log_path}:\n  " + "\n  ".join(tail)
    return os.path.join(build, "libtensorcompute_native.so"), None


class BuildPy(build_py):
    """Also builds the native library into the package (see TENSORCOMPUTE_NATIVE_BUILD)."""

    def run(self):
        super().run()
        mode = os.environ.get("TENSORCOMPUTE_NATIVE_BUILD", "auto").lower()
        dest = os.path.join(self.build_lib, "tensorcompute_client")
        for name in ("libtensorcompute_native.so", NOT_BUILT):
            if os.path.exists(os.path.join(dest, name)):
                os.remove(os.path.join(dest, name))
        if mode in ("0", "off", "no"):
            lib, why = None, "TENSORCOMPUTE_NATIVE_BUILD=0 at install"
        else:
            lib, why = build_native()
        if lib is not None:
            shutil.copy2(lib, os.path.join(dest, "libtensorcompute_native.so"))
            return
        message = (f"tensorcompute-client: libtensorcompute_native was not built: {why}\n"
                   "Without it large tensors travel through grpcio, about 60 times slower.")
        if mode in ("1", "on", "yes", "required"):
            raise SystemExit(message)
        print(f"WARNING: {message}", file=sys.stderr)
        with open(os.path.join(dest, NOT_BUILT), "w") as f:
            f.write(why.splitlines()[0] + "\n")


class Sdist(sdist):
    """Carries the native library's C++ sources (native/src), so that an install from the
    sdist builds it too."""

    def run(self):
        sources = native_sources()
        if sources is not None and sources[0] == REPO:
            staged = os.path.join(NATIVE, "src")
            shutil.rmtree(staged, ignore_errors=True)
            for rel in NATIVE_SOURCES:
                os.makedirs(os.path.dirname(os.path.join(staged, rel)), exist_ok=True)
                shutil.copy2(os.path.join(REPO, rel), os.path.join(staged, rel))
            health = os.path.join(staged, "grpc-proto", HEALTH_PROTO)
            os.makedirs(os.path.dirname(health), exist_ok=True)
            shutil.copy2(os.path.join(GRPC_PROTO_DIR, HEALTH_PROTO), health)
        super().run()


class BinaryDistribution(Distribution):
    """A wheel for this platform: it carries a shared library."""

    def has_ext_modules(self):
        return True


# Before setuptools looks for the packages: tensorcompute_client.v1 is generated.
generate()
setup(cmdclass={"build_py": BuildPy, "sdist": Sdist}, distclass=BinaryDistribution)
