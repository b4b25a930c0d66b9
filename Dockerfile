# The millrace broker in an image (used by docker-compose.yml).
#
#   docker build -t millrace .
#   docker run -p 9092:9092 -v millrace:/data millrace       one single-node broker
#
# Without flags the broker serves 0.0.0.0:9092 (advertising 127.0.0.1:9092, which the published
# port makes right for clients on the host) with its data in /data; flags after the image name
# override both (see docker-compose.yml for a 3-node cluster).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p millrace-broker

FROM debian:bookworm-slim
COPY --from=build /src/target/release/millrace /usr/local/bin/millrace
ENV MILLRACE_DATA_DIR=/data \
    MILLRACE_LISTEN=0.0.0.0:9092
VOLUME /data
EXPOSE 9092
ENTRYPOINT ["millrace"]
