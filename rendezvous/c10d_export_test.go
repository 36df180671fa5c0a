package rendezvous

// StartTorchStore is startTorchStore for the tests of package rendezvous_test.
var StartTorchStore = startTorchStore
