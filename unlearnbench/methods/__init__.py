"""Unlearning methods: `base.UnlearningMethod` and one small module per method, registered in `METHODS`."""
