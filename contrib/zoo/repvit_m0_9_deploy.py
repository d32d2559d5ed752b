"""RepViT: timm ``repvit_m0_9`` with random seeded weights,
re-parameterised for inference as it is shipped (timm's ``reparameterize_model``: branches merged,
BatchNorms folded where timm can), a model of the ytk zoo.

Batch and size as ``repvit_m0_9.py`` (see contrib/zoo/README.md); ``YTK_EXAMPLE_SIZE=BxHxW`` picks another.
"""

from zoo_common import zoo_model

Model, get_fwd_args = zoo_model("repvit_m0_9_deploy")
