"""Evaluation: one inference pass per request, and every published number computed from its logits."""
