"""Adapters that expose polyops kernels to other frameworks under their own op names.

* :mod:`polyops.integrations.vllm`: vLLM's ``_C`` / ``_C_cache_ops`` custom ops
  (see docs/user/vllm.md).
"""
