"""Dataset sources: each module registers one dataset in `unlearnbench.registry.DATASETS`."""
