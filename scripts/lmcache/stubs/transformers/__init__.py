"""A stand-in for transformers, for the LMCache controller only (issue 31).

lmcache 0.5.6 imports AutoTokenizer at module level in
lmcache/v1/token_database.py:20 and uses it only in SegmentTokenDatabase
(CacheBlend's separators), which the controller never builds: its
KVController uses ChunkedTokenDatabase (kv_controller.py:63).
"""


class AutoTokenizer:
    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        raise RuntimeError("transformers is a stand-in here (controller only)")
