"""LeViT: timm ``levit_128s`` with random seeded weights,
re-parameterised for inference as it is shipped (timm's ``reparameterize_model``: branches merged,
BatchNorms folded where timm can), a model of the ytk zoo.

Batch and size as ``levit_128s.py`` (see contrib/zoo/README.md); ``YTK_EXAMPLE_SIZE=BxHxW`` picks another.
"""

from zoo_common import zoo_model

Model, get_fwd_args = zoo_model("levit_128s_deploy")
