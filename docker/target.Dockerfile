# An SSH target host: Debian with OpenSSH sshd. TARGET_BASE is the image made
# by docker/target-base.sh (debootstrap + docker import, which already holds
# openssh-server), or any Debian image where a registry is reachable, e.g.
# debian:bookworm-slim, for which openssh-server is installed here.
ARG TARGET_BASE=gantry/debian-sshd-base:bookworm
FROM ${TARGET_BASE}
RUN command -v sshd >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssh-server && rm -rf /var/lib/apt/lists/*; }; \
    rm -f /etc/ssh/ssh_host_*; mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh
COPY target/sshd_config /etc/ssh/sshd_config
COPY target/entrypoint.sh /entrypoint.sh
EXPOSE 22
HEALTHCHECK --interval=2s --timeout=2s --retries=15 CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/22"]
ENTRYPOINT ["/entrypoint.sh"]
