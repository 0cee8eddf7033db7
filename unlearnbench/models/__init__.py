"""Architecture factories: each module registers archs in `unlearnbench.registry.ARCHS`.

Every model follows timm's interface: `forward_features(x)` returns the backbone's output and
`forward_head(features, pre_logits=False)` pools it and applies the classifier, so feature-space
methods (LOFT) and feature-based attacks work on every arch.
"""
