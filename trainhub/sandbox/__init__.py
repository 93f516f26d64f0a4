"""Real services for tests and demos without Docker: a Kafka broker and Kubernetes planes."""
