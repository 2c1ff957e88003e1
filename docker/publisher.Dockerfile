FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      redis-tools mosquitto-clients mariadb-client amqp-tools \
 && rm -rf /var/lib/apt/lists/*
COPY publisher.sh /publisher.sh
CMD ["bash", "/publisher.sh"]
