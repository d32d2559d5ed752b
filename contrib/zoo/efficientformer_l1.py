"""EfficientFormer: timm ``efficientformer_l1`` with random seeded weights, a model of the ytk zoo.

Takes 224x224 input only.
Batch and size 4x224x224 by default; ``YTK_EXAMPLE_SIZE=BxHxW`` picks another (see contrib/zoo/README.md).
"""

from zoo_common import zoo_model

Model, get_fwd_args = zoo_model("efficientformer_l1")
