"""unlearnbench: a PyTorch Lightning benchmark suite for continual machine unlearning."""

__version__ = "0.1.0"
