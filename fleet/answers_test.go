package fleet

import "testing"

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		predicted, cached float64
		want              Outcome
	}{
		{0.9, 0.9, AsPredicted},
		{0.9, 0.7, AsPredicted},
		{0.9, 0.1, LessCached},
		{0, 0.8, MoreCached},
		{0, 0, AsPredicted},
	} {
		if got := compare(tc.predicted, tc.cached); got != tc.want {
			t.Errorf("compare(%v, %v) = %v, want %v", tc.predicted, tc.cached, got, tc.want)
		}
	}
}

// Answered counts each answer with its outcome, and Forget drops them.
func TestAnswered(t *testing.T) {
	var f Fleet
	if o := f.Answered(3, Answer{PromptTokens: 100, CachedTokens: 90, RoutedBytes: 400, PredictedBytes: 400}); o != AsPredicted {
		t.Errorf("90%% cached of 100%% predicted: %v, want %v", o, AsPredicted)
	}
	if o := f.Answered(3, Answer{PromptTokens: 100, CachedTokens: 0, RoutedBytes: 400, PredictedBytes: 400}); o != LessCached {
		t.Errorf("nothing cached of 100%% predicted: %v, want %v", o, LessCached)
	}
	a, ok := f.Answers(3)
	if want := (Answers{Answers: 2, PromptTokens: 200, CachedTokens: 90, RoutedBytes: 800, PredictedBytes: 800, Outcomes: [numOutcomes]uint64{1, 1, 0}}); !ok || a != want {
		t.Errorf("Answers(3) = %+v, %v; want %+v", a, ok, want)
	}
	if _, ok := f.Answers(4); ok {
		t.Error("Answers(4) of an upstream that never answered: ok")
	}
	f.Forget(3)
	if _, ok := f.Answers(3); ok {
		t.Error("Answers(3) after Forget(3): ok")
	}
}
