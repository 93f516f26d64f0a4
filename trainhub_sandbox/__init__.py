"""The sandbox: real services for tests and demos without Docker, a Kafka broker and
Kubernetes control planes with KWOK nodes. Development infrastructure, outside the product
packages; `trainhub sandbox` (trainhub_sandbox.cli) drives it."""
