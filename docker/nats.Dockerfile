# nats-server, built on the host from the version pinned in
# pkg/natsembed/go.mod, and the gantry CLI for the health check
# (`gantry ping`: NATS answers and JetStream is enabled). Context: bin/linux.
FROM scratch
COPY nats-server /nats-server
COPY gantry /gantry
EXPOSE 4222 8222
ENTRYPOINT ["/nats-server"]
CMD ["--jetstream", "--store_dir", "/data", "--http_port", "8222"]
