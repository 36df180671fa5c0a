package goccl

import "testing"

// TestInspectorSizeLabels: message sizes bucketed as NCCL Inspector's
// message_size label does (inspectorPromFormatMessageSizeRange).
func TestInspectorSizeLabels(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		want string
	}{
		{0, "0B"}, {1, "1-2B"}, {1000, "1000-1001B"}, {1023, "1023-1024B"}, {1024, "1-2KB"}, {8192, "8-9KB"},
		{9000, "8-9KB"}, {1 << 20, "1-2MB"}, {3<<20 - 1, "2-3MB"}, {9 << 29, "4-5GB"}, {3 << 40, "3-4TB"}, {5000 << 40, "5000-5001TB"},
	} {
		if got := sizeLabel(sizeBucket(tc.n)); got != tc.want {
			t.Errorf("%d bytes: %q, want %q", tc.n, got, tc.want)
		}
	}
}
