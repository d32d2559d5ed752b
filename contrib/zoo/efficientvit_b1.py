"""EfficientViT (MIT): timm ``efficientvit_b1`` with random seeded weights, a model of the ytk zoo.

Batch and size 4x1088x1920 by default; ``YTK_EXAMPLE_SIZE=BxHxW`` picks another (see contrib/zoo/README.md).
"""

from zoo_common import zoo_model

Model, get_fwd_args = zoo_model("efficientvit_b1")
