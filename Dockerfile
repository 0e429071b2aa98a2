# A small static image of failover-controller.
#   docker build -t failover-controller .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crd-gen crd-gen
COPY src src
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin failover-controller \
 && cp target/x86_64-unknown-linux-musl/release/failover-controller /failover-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /failover-controller /failover-controller
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/failover-controller"]
