"""A shared prefix tree (``WorkloadTable.prefix_tree``) from block hash ids (Mooncake's and
AIPerf's ``hash_ids``: each id one block of ``block_tokens`` tokens, equal ids equal content).

The tree holds what calls share, and only that: the leading run of blocks a call's list has in
common with at least one other call's list.  Its segments are cut where the calls sharing a
run part ways (a system prompt all calls share, then a repository context a group shares), so
a node is a run of blocks with one set of calls under it.  A node is named by its first
block's hash id (``h0/h6863``: 0 is the first block of the root segment, 6863 the first of the
child); its tokens are its blocks x ``block_tokens``.  A call's own, unshared blocks stay its
message.  A run is cut short so that it leaves the call at least one token of its own (a
shared block is then never a call's last, possibly partial, block).
"""

from __future__ import annotations


def shared_prefixes(hash_lists: list[list[int]], input_tokens: list[int],
                    block_tokens: int) -> tuple[dict[str, int], list[str], list[int]]:
    """(tree: path -> its own segment's tokens, each list's path ("" where it shares nothing),
    each list's shared tokens: its path's segments together)."""
    child: dict[tuple[int, int], int] = {}     # (trie node, hash) -> trie node; 0 is the root
    count = [0]                                # lists through each trie node
    fanout: list[set] = [set()]
    for hashes in hash_lists:
        node = 0
        for h in hashes:
            nxt = child.get((node, h))
            if nxt is None:
                nxt = child[(node, h)] = len(count)
                count.append(0)
                fanout.append(set())
                fanout[node].add(nxt)
            count[nxt] += 1
            node = nxt
    # How far each list's shared run goes, in blocks.
    runs = []
    for hashes, n_in in zip(hash_lists, input_tokens):
        node, r = 0, 0
        for h in hashes:
            node = child[(node, h)]
            if count[node] < 2:
                break
            r += 1
        runs.append(min(r, max(n_in - 1, 0) // block_tokens))
    # Segment ends: where a shared run stops, and where the lists sharing a run part ways.
    cut: set[int] = set()
    for hashes, r in zip(hash_lists, runs):
        node = 0
        for h in hashes[:r]:
            node = child[(node, h)]
            if any(count[c] != count[node] for c in fanout[node]) or not fanout[node]:
                cut.add(node)
        if r:
            cut.add(node)
    tree: dict[str, int] = {}
    paths = []
    for hashes, r in zip(hash_lists, runs):
        node, parts, start, first = 0, [], 0, None
        for k, h in enumerate(hashes[:r]):
            node = child[(node, h)]
            first = h if first is None else first
            if node in cut:
                parts.append(f"h{first}")
                tree["/".join(parts)] = (k + 1 - start) * block_tokens
                start, first = k + 1, None
        paths.append("/".join(parts))
    return tree, paths, [r * block_tokens for r in runs]
