"""The papers the claims come from, as verdicts cite them, and the scale each measured its
claims at (a verdict's scope column sets it beside the scale posexp measured at): above all
the tokens the paper's models trained on, beside the tokens posexp's runs trained on.  A
paper's training tokens are recorded only where its text gives them (steps times tokens a
step, or a count); none is estimated, and a paper whose figure posexp could not confirm
reads NOT_RECORDED -- a corpus's size is not how many tokens a model trained on."""

from dataclasses import dataclass

NOT_RECORDED = "not recorded (no figure confirmed from the paper)"


@dataclass(frozen=True)
class Scale:
    """A paper's scale: its models, data and lengths (``setting``) and the tokens its models
    trained on (``tokens``), with where the paper gives them."""

    setting: str
    tokens: str = NOT_RECORDED


PRESS = "Press et al., Train Short, Test Long (ALiBi), ICLR 2022"
PRESS_SCALE = Scale("247M parameters on WikiText-103 (a corpus of 103M tokens), L = 512-3072")


@dataclass(frozen=True)
class Paper:
    """The paper's own figure for a test's statistic, and where and at what setting the
    paper gives it (verdicts.md's paper column)."""

    value: float
    place: str


# Press et al.'s exact perplexities behind Fig. 1 (its caption: "see Tables 2 and 3 in the
# appendix"), Table 2: WikiText-103 validation, models trained at L = 512; ppl at 512 and
# ppl(n)/ppl(512) at n = 1,012 and 2,512 tokens (about 2L and 4.9L).
PRESS_TABLE = "Table 2 (appendix; WikiText-103, L = 512)"
PRESS_L = 512
PRESS_PPL_L = {"alibi": 19.73, "rope": 20.07, "t5": 19.65, "sinusoidal": 20.05}
PRESS_DEGRADATION = {"alibi": {1012: 0.949, 2512: 0.933}, "rope": {1012: 1.065, 2512: 1.573},
                     "t5": {1012: 0.956, 2512: 1.039}, "sinusoidal": {1012: 2.17, 2512: 6.60}}
PRESS_AT = {2: 1012, 4: 2512}  # a multiple of L here: the paper's nearest length


def _press_length(m: int) -> int | None:
    return PRESS_AT.get(m)


def press_degradation(encoding: str, m: int) -> Paper | None:
    """The paper's ppl(n)/ppl(L) nearest mL, where Table 2 has it."""
    n = _press_length(m)
    if n is None or encoding not in PRESS_DEGRADATION:
        return None
    return Paper(PRESS_DEGRADATION[encoding][n],
                 f"{PRESS_TABLE}, at {n:,} tokens ({n / PRESS_L:.2g}L)")


def press_between(a: str, b: str, m: int) -> Paper | None:
    """The paper's ppl_a(n)/ppl_b(n) nearest mL: each encoding's ppl at L times its ratio
    at n, as Table 2 gives them."""
    n = _press_length(m)
    if n is None or not {a, b} <= set(PRESS_DEGRADATION):
        return None
    value = (PRESS_PPL_L[a] * PRESS_DEGRADATION[a][n]) / (PRESS_PPL_L[b] * PRESS_DEGRADATION[b][n])
    return Paper(value, f"{PRESS_TABLE}, at {n:,} tokens ({n / PRESS_L:.2g}L): "
                        f"({PRESS_PPL_L[a]} x {PRESS_DEGRADATION[a][n]}) / "
                        f"({PRESS_PPL_L[b]} x {PRESS_DEGRADATION[b][n]})")
HAVIV = "Haviv et al., Transformer Language Models without Positional Encodings Still Learn " \
        "Positional Information, Findings of EMNLP 2022"
HAVIV_SCALE = Scale("125M-1.3B parameters on the Pile and WikiText-103, L = 1024")
KAZEMNEJAD = "Kazemnejad et al., The Impact of Positional Encoding on Length Generalization " \
             "in Transformers, NeurIPS 2023"
KAZEMNEJAD_SCALE = Scale("a ~100M-parameter decoder on synthetic reasoning tasks, trained "
                         "on short instances")
CHEN = "Chen et al., Extending Context Window of Large Language Models via Positional " \
       "Interpolation, arXiv:2306.15595 (2023)"
# the models' pretraining tokens are their own paper's (Touvron et al. 2023, LLaMA and Llama
# 2); the tokens of the extension's fine-tune are not recorded
CHEN_SCALE = Scale("LLaMA 7B-65B, L = 2048 extended to 8192-32768, head size 128",
                   "1.0T (LLaMA 7B, 13B) and 1.4T (33B, 65B) in pretraining, Touvron et al. "
                   "2023; the fine-tune's not recorded")
PENG = "Peng et al., YaRN: Efficient Context Window Extension of Large Language Models, " \
       "ICLR 2024"
PENG_SCALE = Scale("Llama 2 7B and 13B, L = 4096 extended to 64k-128k, head size 128",
                   "2T in pretraining, Touvron et al. 2023; the fine-tune's not recorded")
BLOC97 = "bloc97, NTK-Aware Scaled RoPE (r/LocalLLaMA, 2023)"
VASWANI = "Vaswani et al., Attention Is All You Need, NeurIPS 2017"
VASWANI_SCALE = Scale("a 65M-parameter encoder-decoder on WMT 2014 English-German",
                      "about 2.5B target tokens (and as many source): 100,000 steps of about "
                      "25,000 of each, §5.1-5.2")
RUOSS = "Ruoss et al., Randomized Positional Encodings Boost Length Generalization of " \
        "Transformers, ACL 2023"
RUOSS_SCALE = Scale("algorithmic tasks, trained on instances up to 40 tokens, tested to 500")
SUN = "Sun et al., A Length-Extrapolatable Transformer, ACL 2023"
SUN_SCALE = Scale("language models trained at L = 1024, evaluated to 4096")
CHI = "Chi et al., KERPLE: Kernelized Relative Positional Embedding for Length " \
      "Extrapolation, NeurIPS 2022"
CHI_SCALE = Scale("162M parameters on OpenWebText2, GitHub and ArXiv, L = 512, tested to "
                  "16384")
LI = "Li et al., Functional Interpolation for Relative Positions Improves Long Context " \
     "Transformers, ICLR 2024"
LI_SCALE = Scale("base and large models on C4, L = 2048, tested to 8192 and beyond")
# The modern suite's papers (#45); each scale as far as the paper's text (or, where said, its
# authors' repository) was seen to give it.
LIN = "Lin et al., Forgetting Transformer: Softmax Attention with a Forget Gate, ICLR 2025"
LIN_SCALE = Scale("760M parameters on LongCrawl64, L = 16,384 (the authors' repository, "
                  "zhixuan-lin/forgetting-transformer)",
                  "48B (the authors' repository; not confirmed in the paper's text)")
YANG = "Yang et al., Rope to Nope and Back Again: A New Hybrid Attention Strategy, " \
       "NeurIPS 2025"
YANG_SCALE = Scale("Cohere's pretraining of attention variants, then long-context "
                   "fine-tuning, evaluated to 128k and beyond",
                   "up to 750B for the variants compared, 5T for the hybrid")
BARBERO = "Barbero et al., Round and Round We Go! What makes Rotary Positional Encodings " \
          "useful?, ICLR 2025"
BARBERO_SCALE = Scale("Gemma 2B trained from scratch on Wiki and FlanV2 at L = 8,192, "
                      "scored at L")
NAKANISHI = "Nakanishi, Scalable-Softmax Is Superior for Attention, arXiv:2501.19399 (2025)"
NAKANISHI_SCALE = Scale("small language models pretrained with and without SSMax, scored "
                        "past their training length (sizes not confirmed here)")
JIN = "Jin et al., LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning, ICML 2024"
JIN_SCALE = Scale("pretrained Llama 2 and other RoPE models, no training: their pretraining "
                  "windows (4,096 for Llama 2) extended at inference")
CHIANG = "Chiang & Cholak, Overcoming a Theoretical Limitation of Self-Attention, ACL 2022"
CHIANG_SCALE = Scale("small transformers on FIRST and PARITY, and machine translation, "
                     "tested on longer strings than trained")
GOLOVNEVA = "Golovneva et al., Contextual Position Encoding: Learning to Count What's " \
            "Important, arXiv:2405.18719 (2024)"
GOLOVNEVA_SCALE = Scale("small transformers trained on counting, selective copy and "
                        "Flip-Flop, in and out of distribution (sizes not confirmed here)")
