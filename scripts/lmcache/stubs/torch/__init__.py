"""A stand-in for torch, for the LMCache controller only (issue 31).

lmcache 0.5.6's controller imports torch at module level for type
annotations and a dtype table (lmcache/v1/metadata.py:7,47;
lmcache/utils.py:366-380; lmcache/v1/token_database.py:21,275) and never
computes with it: its lookup hashes plain lists of token ids. This module
gives those names so that the controller runs without a 5.7 GB install.
Never put it on the path of anything that runs a model.
"""


class dtype:  # noqa: N801 (torch's name)
    def __init__(self, name=""):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


class Size(tuple):
    pass


class Tensor:
    pass


class device:  # noqa: N801 (torch's name)
    def __init__(self, *args, **kwargs):
        pass


for _name in [
    "half", "float16", "bfloat16", "float", "float32", "double", "float64",
    "int8", "uint8", "int16", "int32", "int64", "bool", "long", "int",
]:
    globals()[_name] = dtype(_name)
