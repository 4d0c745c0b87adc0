"""Output tokens by chunk kind (metrics.token_attribution.tokens_by_kind): a chunk that carries several
kinds at once (vLLM's </think> chunk, content beside a tool call) shares its tokens between them in
proportion to their texts: token counts with the served model's tokenizer, characters without one,
largest remainder, the chunk's total kept."""

from __future__ import annotations

from metrics.token_attribution import tokens_by_kind


def words(text: str) -> int:
    return len(text.split())


THINK_END = (("reasoning", "over "), ("answer", "The answer is "))


def test_a_chunk_of_several_kinds_shares_its_tokens_by_their_token_counts():
    # 5 tokens over parts of 1 and 3 words: 1.25 and 3.75, the spare token to the larger remainder (0.75)
    assert tokens_by_kind([3, 5, 1], ["reasoning", THINK_END, "answer"], words) == {
        "reasoning": 3 + 1, "answer": 4 + 1}
    # equal remainders: the earlier part (stream order: reasoning, answer, tool call) takes the spare one
    both = (("answer", "Calling "), ("tool_call", "get_weather"))
    assert tokens_by_kind([3], [both], words) == {"answer": 2, "tool_call": 1}
    # a chunk that carried no token of its own (its count did not move) gives none to any kind
    assert tokens_by_kind([0], [THINK_END], words) == {"reasoning": 0, "answer": 0}


def test_without_a_tokenizer_the_split_is_by_characters():
    # "over " 5 characters, "The answer is " 14: 5 tokens -> 1.32 and 3.68 -> 1 and 4
    assert tokens_by_kind([5], [THINK_END]) == {"reasoning": 1, "answer": 4}
    # 3 tokens over 5 and 14 characters: 0.79 and 2.21 -> 1 and 2
    assert tokens_by_kind([3], [THINK_END]) == {"reasoning": 1, "answer": 2}
