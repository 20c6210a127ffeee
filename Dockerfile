# tern on Debian 12, run as a non-root user. Build: docker build -t tern .
# Run (tern.ini mounted at /etc/tern): docker run -p 6432:6432 -v $PWD/etc:/etc/tern:ro tern
# Docker's default seccomp profile refuses io_uring_setup: tern then runs on epoll and logs one line
# saying so ([tern] io_backend = auto); for io_uring, run with a profile that allows it, for instance
# --security-opt seccomp=unconfined. bench/docker_smoke.sh builds this image and checks it serves.
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        build-essential meson ninja-build pkg-config liburing-dev libpq-dev libssl-dev libmimalloc-dev \
        libinih-dev libpg-query-dev libxxhash-dev libmicrohttpd-dev libjansson-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN rm -rf build* && meson setup /build --buildtype=release --prefix=/usr --sysconfdir=/etc \
    && meson compile -C /build tern tern.1 && meson install -C /build --no-rebuild --destdir /out \
        --tags runtime,man

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
        liburing2 libpq5 libssl3 libmimalloc2.0 libinih1 libpg-query1504.0 libxxhash0 libmicrohttpd12 \
        libjansson4 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home --shell /usr/sbin/nologin tern \
    && mkdir -p /etc/tern
COPY --from=build /out/ /
USER tern
EXPOSE 6432
ENTRYPOINT ["/usr/bin/tern"]
CMD ["-c", "/etc/tern/tern.ini"]
