"""The algorithmic tasks: instances checked by hand and by an independent computation, the
loss mask, held-out determinism, the metrics and the n/a reasons."""
from collections import Counter

import numpy as np
import pytest

from posexp.data.tasks import (
    TASKS,
    VOCAB,
    VOCAB_SIZE,
    AdditionTask,
    binomial_interval,
    constant_baseline,
    decode,
    encode,
    exact_match,
    get_task,
    heldout,
    max_length_within,
    padded,
    token_accuracy,
    training_batch,
)
from posexp.data.tasks.vocab import EOS, FILLER_PATTERN, HINTS, PAD, SEP

formats = "posexp.data.tasks.formats"


def lengths_of(task) -> list[int]:
    return [task.min_length + k for k in (0, 1, 2, 5, 11)]


def test_vocabulary():
    # 50 words and the index hints #0..#127 of formats.py (Zhou et al. 2024)
    assert VOCAB_SIZE == len(VOCAB) == len(set(VOCAB)) == 50 + HINTS
    assert VOCAB[PAD] == "_" and PAD == 0
    text = "3 1 4 | 4 1 3 ."
    assert decode(encode(text)) == text
    assert encode(text).tolist() == [VOCAB.index(w) for w in text.split()]


@pytest.mark.parametrize("name, args, text", [
    ("copy", (encode("c a b"),), "c a b | c a b ."),
    ("reverse", (encode("c a b"),), "c a b | b a c ."),
    ("sort", (encode("c a b a"),), "c a b a | a a b c ."),
    ("parity", ([1, 0, 1, 1],), "1 0 1 1 | 1 ."),
    ("parity", ([1, 1],), "1 1 | 0 ."),
    ("addition", (57, 68, 2), "5 7 + 6 8 | 1 2 5 ."),
    ("addition", (12, 345, 3), "0 1 2 + 3 4 5 | 0 3 5 7 ."),
    ("addition", (999, 1, 3), "9 9 9 + 0 0 1 | 1 0 0 0 ."),
    ("recall", (encode("c k c").tolist(), [9, 8, 3], encode("c")[0]), "c 9 k 8 c 3 ? c | 3 ."),
    ("recall", (encode("c k c").tolist(), [9, 8, 3], encode("k")[0]), "c 9 k 8 c 3 ? k | 8 ."),
    ("passkey", ([7, 1, 4, 3, 2], 12, 0.5),
     "the grass is key 7 1 4 3 2 green the sky ? | 7 1 4 3 2 ."),
    ("passkey", ([7, 1, 4, 3, 2], 6, 1.0), "key 7 1 4 3 2 ? | 7 1 4 3 2 ."),
    ("count", ([("set", 0), ("pass", 0), ("increment", 0), ("increment", 0)], 0),
     "a 0 the sky a + a + ? a | 0 2 ."),
    ("count", ([("set", 1), ("increment", 1), ("set", 1), ("set", 0), ("increment", 1)], 1),
     "b 0 b + b 0 a 0 b + ? b | 0 1 ."),
    ("niah_multikey", ([(encode("a b"), encode("1 2 3 4 5 6 7")),
                        (encode("c d"), encode("9 8 7 6 5 4 3")),
                        (encode("e f"), encode("2 2 2 2 2 2 2")),
                        (encode("g h"), encode("3 3 3 3 3 3 3"))], [2, 2, 1], 42, 0.0),
     "key a b 1 2 3 4 5 6 7 the key g h 3 3 3 3 3 3 3 grass key c d 9 8 7 6 5 4 3 "
     "key e f 2 2 2 2 2 2 2 ? a b | 1 2 3 4 5 6 7 ."),
    ("niah_multikey", ([(encode("a b"), encode("1 2 3 4 5 6 7")),
                        (encode("c d"), encode("9 8 7 6 5 4 3")),
                        (encode("e f"), encode("2 2 2 2 2 2 2")),
                        (encode("g h"), encode("3 3 3 3 3 3 3"))], [0, 0, 0], 41, 1.0),
     "key c d 9 8 7 6 5 4 3 key e f 2 2 2 2 2 2 2 key g h 3 3 3 3 3 3 3 the "
     "key a b 1 2 3 4 5 6 7 ? a b | 1 2 3 4 5 6 7 ."),
    ("niah_multivalue", ([(encode("a b"), encode(" ".join(str(d) * 7))) for d in (3, 4, 1, 2)],
                         [2, 0, 1], 42, 1.0),
     "key a b 1 1 1 1 1 1 1 the key a b 2 2 2 2 2 2 2 grass key a b 3 3 3 3 3 3 3 "
     "key a b 4 4 4 4 4 4 4 ? a b | 1 1 1 1 1 1 1 2 2 2 2 2 2 2 3 3 3 3 3 3 3 "
     "4 4 4 4 4 4 4 ."),
    ("variable_tracking", ([encode(x) for x in ("a b", "c d", "e f", "g h", "i j")],
                           encode("1 2 3 4 5"), [0, 0, 1, 1, 2], 30),
     "key a b 1 2 3 4 5 key c d a b the key e f c d key g h e f grass key i j g h "
     "? 1 2 3 4 5 | a b c d e f g h i j ."),
])
def test_hand_checked_instances(name, args, text):
    instance = get_task(name).make(*args)
    assert decode(instance.tokens) == text
    assert instance.tokens.dtype == np.int64
    assert instance.tokens[instance.answer_start - 1] == SEP
    assert decode(instance.answer) == text.split(" | ")[1]


def test_the_common_words_are_answered_in_the_order_each_first_stands():
    task = get_task("common_words")
    common = [encode(f"{a} {a}") for a in "jihgfedcba"]
    rare = [encode("k l"), encode("m n")]
    words = [*common, *common * 29, *rare * 3]  # each common word once, then the rest
    instance = task.make(words, 2)
    assert decode(instance.answer) == "j j i i h h g g f f e e d d c c b b a a ."
    assert len(instance.tokens) == task.tokens_for(2)
    with pytest.raises(ValueError, match="needs 10 words 30 times and 2 words 3 times"):
        task.make(words[:-1], 2)  # one rare word twice


def independent_answer(name: str, prompt: str, length: int) -> str:
    """The answer computed from the decoded prompt with plain Python."""
    words = prompt.split()
    if name in ("copy", "reverse", "sort"):
        assert len(words) == length
        return " ".join({"copy": words, "reverse": words[::-1], "sort": sorted(words)}[name])
    if name == "parity":
        assert len(words) == length and set(words) <= {"0", "1"}
        return str(sum(map(int, words)) % 2)
    if name == "addition":
        a, b = ("".join(side.split()) for side in prompt.split(" + "))
        assert len(a) == len(b) == length
        return " ".join(str(int(a) + int(b)).zfill(length + 1))
    if name == "recall":
        *pairs, query_token, query = words
        assert query_token == "?" and len(pairs) == 2 * length
        return dict(zip(pairs[::2], pairs[1::2], strict=True))[query]
    if name == "count":
        return count_answer(words, length)
    if name == "common_words":  # the ten words the list holds 30 times, first seen first
        counts = Counter(zip(words[:-1:2], words[1:-1:2], strict=True))
        assert words[-1] == "?" and sorted(counts.values()) == [3] * length + [30] * 10
        return " ".join(" ".join(w) for w, n in counts.items() if n == 30)
    if name in ("niah_multikey", "niah_multivalue", "variable_tracking"):
        return ruler_answer(name, words, length)
    assert name == "passkey" and words[-1] == "?" and len(words) - 1 == length
    at = words.index("key")
    return " ".join(words[at + 1 : at + 6])


def ruler_answer(name: str, words: list[str], length: int) -> str:
    """RULER's two tasks, read as their definitions say: the context is the filler with
    ``key NAME VALUE`` statements in it, a value a number or (variable tracking) a name."""
    *context, query_token = words[:words.index("?") + 1]
    query = words[words.index("?") + 1:]
    assert query_token == "?" and len(context) == length
    statements, i = [], 0
    while i < len(context):  # outside a statement, the filler pattern runs on unbroken
        if context[i] != "key":
            i += 1
            continue
        name_of, rest = tuple(context[i + 1:i + 3]), context[i + 3:]
        value = rest[:5 if name == "variable_tracking" else 7] if rest[0].isdigit() else rest[:2]
        statements.append((name_of, tuple(value)))
        i += 3 + len(value)
    if name == "niah_multikey":  # four keys of their own; the queried key's number
        assert len(statements) == 4 and len({k for k, _ in statements}) == 4
        return " ".join(dict(statements)[tuple(query)])
    if name == "niah_multivalue":  # one key, four numbers: each, in the order they stand
        assert len(statements) == 4 and {k for k, _ in statements} == {tuple(query)}
        return " ".join(" ".join(v) for _, v in statements)
    # one chain: X1 is the number, each next the one before; every name assigned it
    assert len(statements) == 5
    values = {}
    for var, value in statements:
        values[var] = values.get(value, value)
    return " ".join(" ".join(var) for var, _ in statements if values[var] == tuple(query))


def count_answer(words: list[str], length: int) -> str:
    """CoPE's counting task, run as the program it reads: ``x 0`` sets x, ``x +`` adds one,
    ``the sky`` passes; ``? x`` asks for x, answered in two digits."""
    *program, query_token, query = words
    assert query_token == "?" and len(program) == 2 * length
    values = {}
    for var, op in zip(program[::2], program[1::2], strict=True):
        if (var, op) == ("the", "sky"):
            continue
        values[var] = 0 if op == "0" else values[var] + 1
        assert op in ("0", "+") and values[var] <= 10
    return " ".join(f"{values[query]:02d}")


@pytest.mark.parametrize("name", [n for n in TASKS if type(TASKS[n]).__module__ != formats])
def test_random_instances_match_an_independent_computation(name):
    """The literature's formats of these tasks have their own solvers
    (tests/unit/test_task_formats.py)."""
    task = get_task(name)
    rng = np.random.default_rng(1)
    for length in lengths_of(task):
        for _ in range(40):
            prompt, answer = decode(task.sample(rng, length).tokens).split(" | ")
            assert answer == independent_answer(name, prompt, length) + " ."


@pytest.mark.parametrize("name", TASKS)
def test_loss_mask_covers_the_answer_and_eos_only(name):
    task = get_task(name)
    instances = [i for n in lengths_of(task) for i in heldout(task, n, 5, seed=3)]
    inputs, targets, mask = padded(instances)
    assert inputs.shape == targets.shape == mask.shape
    assert inputs.shape == (len(instances), max(len(i.tokens) for i in instances) - 1)
    for row, instance in enumerate(instances):
        answer = decode(instance.tokens).split(" | ")[1].split()  # answer words, "." last
        assert mask[row].sum() == len(answer)
        assert decode(targets[row][mask[row]]) == " ".join(answer)
        n = len(instance.tokens) - 1
        assert (inputs[row, :n] == instance.tokens[:-1]).all()
        assert (inputs[row, n:] == PAD).all() and (targets[row, n:] == PAD).all()
    assert not (targets[mask] == PAD).any()


@pytest.mark.parametrize("name", TASKS)
def test_training_batch_rows(name):
    task = get_task(name)
    top = task.min_length + 6
    inputs, targets, mask = training_batch(task, np.random.default_rng(0), 300, top)
    lengths = set()
    for row in range(len(inputs)):
        scored = np.flatnonzero(mask[row])
        assert (np.diff(scored) == 1).all()  # one contiguous run
        assert inputs[row, scored[0]] == SEP and targets[row, scored[-1]] == EOS
        assert (targets[row, scored[-1] + 1 :] == PAD).all()
        size = scored[-1] + 2
        lengths.add(next(n for n in range(task.min_length, top + 1) if task.tokens_for(n) == size))
    assert lengths == set(range(task.min_length, top + 1))
    assert inputs.shape[1] == task.tokens_for(top) - 1
    assert not (targets[mask] == PAD).any()


def fingerprint(instances) -> list[str]:
    return [decode(i.tokens) for i in instances]


@pytest.mark.parametrize("name", TASKS)
def test_heldout_sets_differ_by_length_seed_and_depth(name):
    task = get_task(name)
    n = task.min_length + 4
    base = fingerprint(heldout(task, n, 30, seed=0))
    assert fingerprint(heldout(task, n, 10, seed=0)) == base[:10]  # a prefix of a larger set
    assert fingerprint(heldout(task, n, 30, seed=1)) != base
    assert fingerprint(heldout(task, n + 1, 30, seed=0)) != base
    if task.takes_depth:
        at_half = heldout(task, n, 30, seed=0, depth=0.5)
        assert {i.depth for i in at_half} == {0.5}
        assert fingerprint(at_half) != fingerprint(heldout(task, n, 30, seed=0, depth=0.25))
    else:
        with pytest.raises(ValueError, match="takes no depth"):
            heldout(task, n, 1, seed=0, depth=0.5)


def test_oracle_and_single_errors():
    instances = heldout(get_task("addition"), 3, 4, seed=0)
    _, targets, mask = padded(instances)
    assert exact_match(targets, targets, mask).all()
    assert (token_accuracy(targets, targets, mask) == 1).all()
    pred = targets.copy()
    pred[~mask] = PAD  # unscored positions do not count
    pred[1, np.flatnonzero(mask[1])[2]] = EOS
    assert exact_match(pred, targets, mask).tolist() == [True, False, True, True]
    assert token_accuracy(pred, targets, mask).tolist() == [1, 1 - 1 / 5, 1, 1]


@pytest.mark.parametrize("name", TASKS)
def test_a_constant_predictor_scores_the_constant_baseline(name):
    task = get_task(name)
    # a short counting program mostly passes (its reference's weights), its answer nearly
    # always 0: the baseline is measured where the task asks something
    length = 32 if name == "count" else task.min_length + 1
    instances = heldout(task, length, 300, seed=0)
    answers = [tuple(i.answer.tolist()) for i in instances]
    modes = [Counter(column).most_common(1)[0][0] for column in zip(*answers, strict=True)]
    common = Counter(answers).most_common(1)[0][0]
    _, targets, mask = padded(instances)
    per_position, whole = np.full_like(targets, PAD), np.full_like(targets, PAD)
    for row in range(len(instances)):
        scored = np.flatnonzero(mask[row])
        per_position[row, scored], whole[row, scored] = modes, common
    exact, per_token = constant_baseline(instances)
    assert exact == pytest.approx(exact_match(whole, targets, mask).mean())
    assert per_token == pytest.approx(token_accuracy(per_position, targets, mask).mean())
    assert exact < 0.6 and per_token < 0.8


@pytest.mark.parametrize(("hinted", "plain"), [("copy_hints", "copy"),
                                               ("addition_hints", "addition_reversed")])
def test_token_accuracy_counts_no_index_hint(hinted, plain):
    """Index hints follow one another in an answer: a model that writes every hint and no
    symbol right has learned nothing of the task, and scores only its EOS."""
    n = 4
    instances = heldout(get_task(hinted), n, 200, seed=0)
    _, targets, mask = padded(instances)
    hints = (targets >= VOCAB.index("#0")) & mask
    wrong = np.where(hints | (targets == EOS), targets, PAD)  # hints and EOS right only
    symbols = (mask & ~hints).sum(axis=1)
    assert token_accuracy(wrong, targets, mask) == pytest.approx(1 / symbols)
    assert (token_accuracy(targets, targets, mask) == 1).all()
    # the chance level of the symbols alone: the plain format's at the same length
    plain_chance = constant_baseline(heldout(get_task(plain), n, 2000, seed=1))[1]
    assert constant_baseline(heldout(get_task(hinted), n, 2000, seed=1))[1] == \
        pytest.approx(plain_chance, abs=0.02)


def test_constant_baseline_over_mixed_lengths():
    # answers "a ." x2 and "b b b ." x3: always "b b b ." gets 3/5 exact; per token, "a . b ."
    # scores (2 * 1 + 3 * 2/4) / 5 = 0.7, beating the column majority "b b b ." at 0.6
    copy = get_task("copy")
    instances = [copy.make(encode("a"))] * 2 + [copy.make(encode("b b b"))] * 3
    assert constant_baseline(instances) == pytest.approx((0.6, 0.7))


def test_parity_baseline_is_the_majority_bit():
    instances = heldout(get_task("parity"), 5, 200, seed=0)
    odd = np.mean([decode(i.answer) == "1 ." for i in instances])
    exact, per_token = constant_baseline(instances)
    assert exact == pytest.approx(max(odd, 1 - odd))
    assert per_token == pytest.approx((exact + 1) / 2)  # EOS is always right


def test_wilson_interval_known_values():
    # z = 1.959963985; at 0 successes the upper end is z^2 / (n + z^2)
    assert binomial_interval(0, 10) == pytest.approx((0.0, 0.2775327999), abs=1e-6)
    assert binomial_interval(10, 10) == pytest.approx((0.7224672001, 1.0), abs=1e-6)
    assert binomial_interval(5, 10) == pytest.approx((0.2365930905, 0.7634069095), abs=1e-6)
    assert binomial_interval(3, 20, 0.9) == pytest.approx((0.0615824, 0.3218281), abs=1e-6)
    with pytest.raises(ValueError):
        binomial_interval(1, 0)


def test_why_not_reasons():
    assert get_task("addition").why_not(25) == "addition: 25 digits is past the 20-digit limit"
    assert AdditionTask(max_digits=3).why_not(4) == "addition: 4 digits is past the 3-digit limit"
    assert get_task("parity").why_not(0) == "parity: length 0 is below the minimum 1"
    assert get_task("passkey").why_not(5) == (
        "passkey: a context of 5 tokens cannot hold the 6-token key block")
    for name in ("niah_multikey", "niah_multivalue"):  # each says its own name
        assert get_task(name).why_not(39) == (
            f"{name}: a context of 39 tokens cannot hold its 4 needles of 10 tokens")
    assert get_task("variable_tracking").why_not(27) == (
        "variable_tracking: a context of 27 tokens cannot hold its chain of 28 tokens")
    assert get_task("common_words").why_not(667) == (
        "common_words: 667 uncommon words; there are 676 words of 2 letters, ten of them "
        "the common ones")
    for task in TASKS.values():
        assert all(task.why_not(n) is None for n in range(task.min_length, 21))
    with pytest.raises(ValueError, match="past the 20-digit limit"):
        heldout(get_task("addition"), 21, 1, seed=0)
    with pytest.raises(ValueError, match="past the 20-digit limit"):
        training_batch(get_task("addition"), np.random.default_rng(0), 2, 21)
    with pytest.raises(ValueError, match="cannot hold"):
        get_task("passkey").sample(np.random.default_rng(0), 3)
    with pytest.raises(ValueError, match="copy, reverse, sort, parity, addition"):
        get_task("lego")


@pytest.mark.parametrize("name", TASKS)
def test_tokens_for_is_the_instance_size(name):
    task = get_task(name)
    rng = np.random.default_rng(2)
    for length in lengths_of(task):
        sizes = {len(task.sample(rng, length).tokens) for _ in range(50)}
        assert sizes == {task.tokens_for(length)}


def test_max_length_within_boundaries():
    copy = get_task("copy")  # 2n + 2 tokens
    assert [max_length_within(copy, s) for s in (4, 5, 12, 13, 14)] == [1, 1, 5, 5, 6]
    with pytest.raises(ValueError, match="takes 4 tokens, more than seq_len=3"):
        max_length_within(copy, 3)
    assert max_length_within(get_task("addition"), 1000) == 20  # the digit limit, not seq_len
    for task in TASKS.values():
        for seq_len in range(task.tokens_for(task.min_length), 80):
            n = max_length_within(task, seq_len)
            assert task.why_not(n) is None and task.tokens_for(n) <= seq_len
            assert task.why_not(n + 1) is not None or task.tokens_for(n + 1) > seq_len


@pytest.mark.parametrize("depth, at", [(0.0, 0), (0.25, 6), (0.5, 12), (0.99, 24), (1.0, 24)])
def test_passkey_sits_at_its_depth_in_the_fixed_filler(depth, at):
    passkey = get_task("passkey")
    for instance in heldout(passkey, 30, 20, seed=0, depth=depth):
        context = decode(instance.prompt[:-1]).split()
        assert len(context) == 30 and context.count("key") == 1
        assert context.index("key") == at
        key = context[at + 1 : at + 6]
        assert " ".join(key) + " ." == decode(instance.answer)
        filler = context[:at] + context[at + 6 :]
        assert filler == decode(np.resize(FILLER_PATTERN, 24)).split()


def test_passkey_depth_drawn_when_not_given():
    depths = [i.depth for i in heldout(get_task("passkey"), 40, 200, seed=0)]
    assert all(0 <= d < 1 for d in depths) and np.std(depths) > 0.2
