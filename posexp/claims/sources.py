"""The papers the claims come from, as verdicts cite them."""

PRESS = "Press et al., Train Short, Test Long (ALiBi), ICLR 2022"
HAVIV = "Haviv et al., Transformer Language Models without Positional Encodings Still Learn " \
        "Positional Information, Findings of EMNLP 2022"
KAZEMNEJAD = "Kazemnejad et al., The Impact of Positional Encoding on Length Generalization " \
             "in Transformers, NeurIPS 2023"
CHEN = "Chen et al., Extending Context Window of Large Language Models via Positional " \
       "Interpolation, arXiv:2306.15595 (2023)"
PENG = "Peng et al., YaRN: Efficient Context Window Extension of Large Language Models, " \
       "ICLR 2024"
BLOC97 = "bloc97, NTK-Aware Scaled RoPE (r/LocalLLaMA, 2023)"
VASWANI = "Vaswani et al., Attention Is All You Need, NeurIPS 2017"
RUOSS = "Ruoss et al., Randomized Positional Encodings Boost Length Generalization of " \
        "Transformers, ACL 2023"
SUN = "Sun et al., A Length-Extrapolatable Transformer, ACL 2023"
CHI = "Chi et al., KERPLE: Kernelized Relative Positional Embedding for Length " \
      "Extrapolation, NeurIPS 2022"
LI = "Li et al., Functional Interpolation for Relative Positions Improves Long Context " \
     "Transformers, ICLR 2024"
