# tensorcompute server images.
#   docker build -t tensorcompute .                 # CUDA image (default target)
#   docker build --target cpu -t tensorcompute:cpu .  # CPU-only image, no CUDA
ARG CUDA_VERSION=13.0.0

# ---- CUDA build
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

# ---- CPU-only build
FROM ubuntu:24.04 AS build-cpu
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      cmake ninja-build g++ pkg-config libgrpc++-dev libprotobuf-dev protobuf-compiler \
      protobuf-compiler-grpc grpc-proto libabsl-dev libcivetweb-dev libgoogle-perftools-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DWITH_CUDA=OFF \
 && cmake --build /build --target tensorcompute-server tensorcompute-cli

# ---- runtime layers shared by both images (civetweb's library comes with its -dev package,
# whose name does not change with the distribution's ABI renames)
FROM ubuntu:24.04 AS cpu
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libgrpc++1.51t64 libprotobuf32t64 libabsl20220623t64 libcivetweb-dev libtcmalloc-minimal4t64 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home tensorcompute
COPY --from=build-cpu /build/server/tensorcompute-server /build/client/tensorcompute-cli /usr/local/bin/
USER tensorcompute
EXPOSE 50051 9450
ENV TENSORCOMPUTE_BACKEND=cpu
# The first check comes one interval after the start, when the server has long been up.
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["tensorcompute-cli", "--timeout=2", "health"]
ENTRYPOINT ["tensorcompute-server"]

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
