package replay

// EncodeState is State.encode, for the tests of package replay_test that store a snapshot
// of their own.
var EncodeState = (*State).encode
