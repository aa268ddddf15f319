# nats-server, built on the host from the version pinned in
# pkg/natsembed/go.mod, and the gantry CLI for the health check
# (`gantry ping`: NATS answers and JetStream is enabled). Context: bin/linux.
# docker-compose.yml runs it with `-c /auth/server.conf` (the accounts, users
# and permissions of `gantry auth init`, mounted read-only, mode 0600); the
# CMD below is a server without authentication. Root, as in service.Dockerfile,
# so the 0600 files mounted from the host are readable whoever owns them.
FROM scratch
COPY nats-server /nats-server
COPY gantry /gantry
USER 0
EXPOSE 4222 8222
ENTRYPOINT ["/nats-server"]
CMD ["--jetstream", "--store_dir", "/data", "--http_port", "8222"]
