package outbox

import "sync"

// published tracks which of this node's transactions may have events that JetStream has not
// stored yet, so that the node can vouch for all the others (Published) and the sweep publishes
// only what nobody vouches for.
//
// Every transaction of InTx holds a pending entry from before it starts until JetStream stored
// its events. The entry's xid is a lower bound of the transaction's xid until its Append
// returns the real one: xids only grow, so a transaction that starts now gets one above every
// xid already seen. Hence Published() = the least pending xid, or one above the highest xid
// seen, is below the xid of every event this node committed and JetStream may lack.
//
// An entry whose events may be committed but were not published (the commit's answer was lost,
// the publish queue was full, the node stops) stays pending: the sweep publishes those events,
// and the entry is dropped once the sweep's cursor has passed its xid (Swept).
type published struct {
	mu      sync.Mutex
	maxSeen uint64
	pending map[*pendingTx]struct{}
}

// pendingTx is one transaction of InTx whose events may not be in JetStream yet.
type pendingTx struct {
	xid   uint64 // the transaction's xid once known; a lower bound before
	known bool
}

func newPublished() *published { return &published{pending: map[*pendingTx]struct{}{}} }

// begin registers a transaction about to start.
func (p *published) begin() *pendingTx {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &pendingTx{xid: p.maxSeen + 1}
	p.pending[t] = struct{}{}
	return t
}

// assigned records the xid a transaction's Append returned.
func (p *published) assigned(t *pendingTx, xid uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t.xid, t.known = xid, true
	p.maxSeen = max(p.maxSeen, xid)
}

// done says t's events are all in JetStream, or t committed none.
func (p *published) done(t *pendingTx) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pending, t)
}

// failed ends t after its transaction returned an error. A transaction that never got its xid
// back wrote no event that can commit (an error before or in Append aborts it); one that did may
// have committed with the answer lost, so it stays pending until the sweep passed it.
func (p *published) failed(t *pendingTx) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !t.known {
		delete(p.pending, t)
	}
}

// seen records an xid the database assigned (a check-in's), and the sweep cursor's xid: the
// sweep has passed every row of a transaction below it, so such entries need no more waiting.
func (p *published) seen(xid, cursor uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.maxSeen = max(p.maxSeen, xid)
	for t := range p.pending {
		if t.known && t.xid < cursor {
			delete(p.pending, t)
		}
	}
}

// below is the xid under which every event this node committed is stored in JetStream.
func (p *published) below() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.maxSeen + 1
	for t := range p.pending {
		w = min(w, t.xid)
	}
	return w
}
