# tensorcompute server images.
#   docker build --target cpu -t tensorcompute:cpu .   # CPU image, Debian 12, compiled in the image
#   docker build -t tensorcompute .                    # CUDA image (default target), NVIDIA base
# Where no image registry can be reached, deploy/debian-base.sh makes debian:bookworm-slim from
# Debian's packages first (docs/deployment.md). With --build-arg TC_PREBUILT=build the CPU
# image takes the server and CLI from a build tree of this checkout (made on Debian 12, whose
# libraries the image carries) instead of compiling them again; a server built with CUDA
# serves on the CPU there.
ARG CUDA_VERSION=13.0.0

# ---- CPU image: Debian 12's gRPC, protobuf and Abseil, as on the machines it is tested on.
# (The stages the CPU image needs come first: Docker's classic builder builds every stage up to
# the target, and the CUDA base cannot be fetched everywhere.)
FROM debian:bookworm-slim AS build-cpu
ARG TC_PREBUILT=
WORKDIR /src
COPY . .
RUN set -eu; mkdir /out; \
    if [ -n "$TC_PREBUILT" ]; then \
      cp "$TC_PREBUILT/server/tensorcompute-server" "$TC_PREBUILT/client/tensorcompute-cli" /out/; \
    else \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        cmake ninja-build g++ pkg-config libgrpc++-dev libprotobuf-dev protobuf-compiler \
        protobuf-compiler-grpc grpc-proto libabsl-dev libcivetweb-dev libgoogle-perftools-dev; \
      cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DWITH_CUDA=OFF; \
      cmake --build /build --target tensorcompute-server tensorcompute-cli; \
      cp /build/server/tensorcompute-server /build/client/tensorcompute-cli /out/; \
      strip /out/*; \
    fi

FROM debian:bookworm-slim AS cpu
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libcivetweb1 libtcmalloc-minimal4 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home tensorcompute
COPY --from=build-cpu /out/ /usr/local/bin/
USER tensorcompute
EXPOSE 50051 9450
ENV TENSORCOMPUTE_BACKEND=cpu
# The first check comes one interval after the start, when the server has long been up.
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["tensorcompute-cli", "--timeout=2", "health"]
ENTRYPOINT ["tensorcompute-server"]

# ---- CUDA image: NVIDIA's base (Ubuntu 24.04), which Debian's packages cannot stand in for.
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04 AS build-cuda
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake ninja-build g++ pkg-config libgrpc++-dev libprotobuf-dev protobuf-compiler \
      protobuf-compiler-grpc grpc-proto libabsl-dev libcivetweb-dev libgoogle-perftools-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DWITH_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 \
 && cmake --build /build --target tensorcompute-server tensorcompute-cli

FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04 AS cuda
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51t64 libprotobuf32t64 libabsl20220623t64 libcivetweb-dev libtcmalloc-minimal4t64 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home tensorcompute
COPY --from=build-cuda /build/server/tensorcompute-server /build/client/tensorcompute-cli /usr/local/bin/
USER tensorcompute
EXPOSE 50051 9450
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["tensorcompute-cli", "--timeout=2", "health"]
ENTRYPOINT ["tensorcompute-server"]
