ARG BASE_IMAGE=debian:12-slim
FROM ${BASE_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends \
      redis-tools mosquitto-clients mariadb-client amqp-tools \
 && rm -rf /var/lib/apt/lists/*
COPY publisher.sh /publisher.sh
CMD ["bash", "/publisher.sh"]
