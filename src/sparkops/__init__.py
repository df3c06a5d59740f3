"""sparkops: a deployment kit for batch research inference with vLLM on NVIDIA GB10 machines."""

__version__ = "0.1.0"
