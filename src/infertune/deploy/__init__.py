"""`infertune deploy`: Kubernetes manifests and docker compose files from a tuned artifact or a plan.

Library entry point: `infertune.deploy.emit.deploy(DeployConfig(...)) -> DeployResult`."""
