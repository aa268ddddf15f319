# One gantry service: a static binary (CGO_ENABLED=0, built on the host by
# `make images`) in an empty image. The build context is bin/linux.
FROM scratch
ARG BIN
COPY ${BIN} /service
# root: reads its nkey seed (mode 0600, mounted read-only from
# dev/keys/nats) whoever owns it on the host
USER 0
ENTRYPOINT ["/service"]
