# syntax=docker/dockerfile:1
#
# One image with both binaries: `prefix-router` (serve, reporter, inspect)
# and `sim-worker`. No model, tokenizer or secret is baked in: mount the
# tokenizer directory at run time and pass PREFIX_ROUTER_INTERNAL_TOKEN in
# the environment (docker-compose.yml reads it from .env). The Lua scripts
# are compiled into the binary.
#
#   docker build -t prefix-router .
#   docker run --rm -e PREFIX_ROUTER_INTERNAL_TOKEN=... \
#     -e PREFIX_ROUTER_VALKEY=redis://valkey:6379 -p 127.0.0.1:8080:8080 prefix-router

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the registry and the target directory between builds;
# the binaries are copied out of the cached target directory. Debug info is
# stripped (symbols stay, so backtraces keep function names).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin prefix-router --bin sim-worker \
 && mkdir -p /out \
 && cp target/release/prefix-router target/release/sim-worker /out/ \
 && strip --strip-debug /out/prefix-router /out/sim-worker

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 prefix-router \
 && useradd --system --uid 10001 --gid prefix-router --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin prefix-router
COPY --from=builder /out/prefix-router /out/sim-worker /usr/local/bin/
USER 10001:10001
WORKDIR /tmp
# Inside a container the router must listen beyond loopback to be reached.
ENV PREFIX_ROUTER_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["prefix-router"]
CMD ["serve"]
