# mcp-ws in a container: built with the Rust toolchain, run on Debian slim as a non-root user.
#
#   docker build -t mcp-ws .
#   docker run --rm -p 8765:8765 mcp-ws
#
# The endpoint is then ws://localhost:8765/mcp and http://localhost:8765/mcp. Settings: mount
# a file over /app/config/default.toml, or name one with MCP_WS_CONFIG (docs/configuration.md).

# Build stage: the toolchain the crate needs (rust-version in Cargo.toml) and a C compiler
# (mimalloc and ring build C code; the image has gcc).
FROM rust:1.91-bookworm AS build
WORKDIR /src
COPY . .
# .cargo/config.toml (copied with the sources) sets the C flags mimalloc is built with. The
# release profile keeps line tables for profiling; the image's binary goes without them
# (20 MB instead of 109), its symbols kept for backtraces.
RUN CARGO_PROFILE_RELEASE_STRIP=debuginfo cargo build --release --locked --bin mcp-ws

# Run stage: the binary, its default configuration and curl for the health check.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin mcp
WORKDIR /app
COPY --from=build /src/target/release/mcp-ws /usr/local/bin/mcp-ws
COPY config/default.toml /app/config/default.toml
USER mcp
# All interfaces, so that the published port reaches the server (the file's default is
# 127.0.0.1). Off loopback, Host is not checked unless http.allowed_hosts is set: set it to
# the names clients use.
ENV MCP_WS_LISTEN=0.0.0.0:8765
EXPOSE 8765
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD curl --fail --silent --max-time 2 http://127.0.0.1:8765/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/mcp-ws"]
