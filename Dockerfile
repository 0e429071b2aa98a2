# The failover-controller image.
#   docker build -t failover-controller .
# Both base images are build arguments, so a build without registry access can supply local ones
# (hack/images.sh does, for the tests on a real node): a Rust toolchain on Debian 12, and a
# runtime with glibc and a nonroot user.
ARG BUILDER_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILDER_IMAGE} AS build
# The version the controller reports (a release's; empty: the crate's).
ARG FAILOVER_VERSION=
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates crates
COPY crd-gen crd-gen
COPY src src
# The target cache is shared by every build on the machine, of whatever checkout: cargo judges a
# crate fresh by its sources' mtimes, so the sources are touched to be newer than anything cached
# (the dependencies stay cached; the project's own crates are compiled from these sources).
RUN --mount=type=cache,target=/usr/local/cargo/registry --mount=type=cache,target=/src/target \
    if [ -z "$FAILOVER_VERSION" ]; then unset FAILOVER_VERSION; fi \
 && find crates crd-gen src -type f -exec touch {} + \
 && cargo build --release --locked --bin failover-controller \
 && cp target/release/failover-controller /failover-controller

FROM ${RUNTIME_IMAGE}
COPY --from=build /failover-controller /failover-controller
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/failover-controller"]
