"""The papers the claims come from, as verdicts cite them, and the scale each measured its
claims at (a verdict's scope column sets it beside the scale posexp measured at)."""

PRESS = "Press et al., Train Short, Test Long (ALiBi), ICLR 2022"
PRESS_SCALE = "247M parameters on WikiText-103 (103M tokens), L = 512-3072"
HAVIV = "Haviv et al., Transformer Language Models without Positional Encodings Still Learn " \
        "Positional Information, Findings of EMNLP 2022"
HAVIV_SCALE = "125M-1.3B parameters on the Pile and WikiText-103, L = 1024"
KAZEMNEJAD = "Kazemnejad et al., The Impact of Positional Encoding on Length Generalization " \
             "in Transformers, NeurIPS 2023"
KAZEMNEJAD_SCALE = "a ~100M-parameter decoder on synthetic reasoning tasks, trained on " \
                   "short instances"
CHEN = "Chen et al., Extending Context Window of Large Language Models via Positional " \
       "Interpolation, arXiv:2306.15595 (2023)"
CHEN_SCALE = "LLaMA 7B-65B, L = 2048 extended to 8192-32768, head size 128"
PENG = "Peng et al., YaRN: Efficient Context Window Extension of Large Language Models, " \
       "ICLR 2024"
PENG_SCALE = "Llama 2 7B and 13B, L = 4096 extended to 64k-128k, head size 128"
BLOC97 = "bloc97, NTK-Aware Scaled RoPE (r/LocalLLaMA, 2023)"
VASWANI = "Vaswani et al., Attention Is All You Need, NeurIPS 2017"
VASWANI_SCALE = "a 65M-parameter encoder-decoder on WMT 2014 English-German"
RUOSS = "Ruoss et al., Randomized Positional Encodings Boost Length Generalization of " \
        "Transformers, ACL 2023"
RUOSS_SCALE = "algorithmic tasks, trained on instances up to 40 tokens, tested to 500"
SUN = "Sun et al., A Length-Extrapolatable Transformer, ACL 2023"
SUN_SCALE = "language models trained at L = 1024, evaluated to 4096"
CHI = "Chi et al., KERPLE: Kernelized Relative Positional Embedding for Length " \
      "Extrapolation, NeurIPS 2022"
CHI_SCALE = "162M parameters on OpenWebText2, GitHub and ArXiv, L = 512, tested to 16384"
LI = "Li et al., Functional Interpolation for Relative Positions Improves Long Context " \
     "Transformers, ICLR 2024"
LI_SCALE = "base and large models on C4, L = 2048, tested to 8192 and beyond"
