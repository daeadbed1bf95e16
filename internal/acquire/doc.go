// Package acquire is step ② of the lifecycle: it claims due triggers for this node.
//
// One acquire transaction takes the TRIGGER_ACCESS lock (Quartz's lock protocol), selects up to
// Batch WAITING triggers due within the fire-ahead window, and then:
//
//   - triggers already due are fired in the same transaction (Firer.FireInTx): one transaction,
//     one trigger update, one fired row and one event per fire, the least a fire can write;
//   - triggers due later in the window are marked ACQUIRED with a fired row in state ACQUIRED and
//     handed to the Firer, which fires them at their time in a transaction of its own.
//
// Every UPDATE carries an optimistic guard (state and next_fire_time as read), so even a lost lock
// cannot double-fire. Triggers more than the misfire threshold late are left to recovery's misfire
// scan, as Quartz leaves them to its MisfireHandler.
//
//	WAITING ──acquire──▶ ACQUIRED ──fire──▶ WAITING | BLOCKED | COMPLETE
//	WAITING ────────acquire+fire─────────▶ WAITING | BLOCKED | COMPLETE
package acquire
