# `make dev-keys` in a container (docker/dev-keys.sh with ssh-keygen and the
# gantry CLI): the compose stack's keys service writes dev/keys and
# dev/secrets with it, so `docker compose up` alone has them. Built by
# `make images` from the target base (which holds ssh-keygen) without a
# registry; the build context is bin/linux.
ARG TARGET_BASE=gantry/debian-sshd-base:bookworm
FROM ${TARGET_BASE}
RUN command -v ssh-keygen >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssh-client && rm -rf /var/lib/apt/lists/*; }
COPY gantry /usr/local/bin/gantry
COPY dev-keys.sh /usr/local/bin/dev-keys
ENV GANTRY=/usr/local/bin/gantry
ENTRYPOINT ["/usr/local/bin/dev-keys"]
