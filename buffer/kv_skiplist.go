package buffer

// Each shard of a KV table keeps its keys in an insert-only skip list: the
// shard's writer links nodes under the shard mutex, readers walk with atomic
// loads. A node's own links are set before it is published, level 0 first,
// so a reader that reaches a node can always move on from it, and a reader
// never sees a key out of order.

// findPrev fills prev with the last node at each level whose key is < k.
func findPrev(head *node, k string, prev *[maxLevel]*node) {
	x := head
	for l := maxLevel - 1; l >= 0; l-- {
		for {
			nx := x.next(l).Load()
			if nx == nil || nx.key() >= k {
				break
			}
			x = nx
		}
		prev[l] = x
	}
}

// link inserts n (not yet reachable) into sh's list. sh.mu held; n's key is
// not in the list.
func (sh *shard) link(n *node) {
	var prev [maxLevel]*node
	findPrev(sh.head, n.key(), &prev)
	h := int(n.h)
	for l := range h {
		n.next(l).Store(prev[l].next(l).Load())
	}
	for l := range h {
		prev[l].next(l).Store(n) // level 0 first: from here readers see n
	}
}

// seekGE returns the first node with key >= k, or nil.
//
// It returns the level-0 successor it compared with k, never a fresh load of
// the predecessor's link: a writer may link a node after the predecessor at
// any moment, and that node's key may be < k too.
func seekGE(head *node, k string) *node {
	x := head
	var nx *node
	for l := maxLevel - 1; l >= 0; l-- {
		for {
			nx = x.next(l).Load()
			if nx == nil || nx.key() >= k {
				break
			}
			x = nx
		}
	}
	return nx
}

// seekLT returns the last node with key < k, or nil.
func seekLT(head *node, k string) *node {
	x := head
	for l := maxLevel - 1; l >= 0; l-- {
		for {
			nx := x.next(l).Load()
			if nx == nil || nx.key() >= k {
				break
			}
			x = nx
		}
	}
	if x == head {
		return nil
	}
	return x
}

// lastNode returns the node with the largest key, or nil.
func lastNode(head *node) *node {
	x := head
	for l := maxLevel - 1; l >= 0; l-- {
		for {
			nx := x.next(l).Load()
			if nx == nil {
				break
			}
			x = nx
		}
	}
	if x == head {
		return nil
	}
	return x
}
