"""dsa-forkkit's rebaser: lay an overlay and a patch series onto upstream Megatron-LM,
verify the result and test it."""

__version__ = "0.1.0"
