# Builds the millrace binary and runs it. Used by docker-compose.yml.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p millrace-broker

FROM debian:bookworm-slim
COPY --from=build /src/target/release/millrace /usr/local/bin/millrace
VOLUME /data
EXPOSE 9092
ENTRYPOINT ["millrace", "--data-dir", "/data", "--listen", "0.0.0.0:9092"]
