"""Generates the gRPC stubs from the repository's proto at build time (protoc and
grpc_python_plugin: Debian's protobuf-compiler and protobuf-compiler-grpc), so the package
always speaks the contract it was built from.

    /usr/bin/python3 -m pip install --no-build-isolation client/python
"""
import os
import shutil
import subprocess

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.join(HERE, "..", "..", "proto")
PROTO = "tensorcompute/v1/tensor_service.proto"
OUT = os.path.join(HERE, "tensorcompute_client", "v1")


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


# Before setuptools looks for the packages: tensorcompute_client.v1 is generated.
generate()
setup()
