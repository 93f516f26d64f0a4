"""trainhub's initializer program: what a TrainJob's dataset or model initializer runs to put
its `STORAGE_URI` under the shared workspace (`python -m workers.initializer dataset|model`)."""
