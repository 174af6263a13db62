package master

import (
	"testing"
	"time"
)

// A principal's denial lines come in a burst, then at the ration's rate;
// what is held back is reported with its next logged line; one principal's
// flood does not use another's ration.
func TestAuditRationPerPrincipal(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newAuditRation(func() time.Time { return now })
	logged := 0
	for range auditDenialBurst + 50 {
		if ok, _ := r.admit("mallory"); ok {
			logged++
		}
	}
	if logged != auditDenialBurst || r.Suppressed() != 50 {
		t.Fatalf("%d of %d denials logged, %d suppressed; want the burst of %d and 50", logged, auditDenialBurst+50, r.Suppressed(), auditDenialBurst)
	}
	if ok, _ := r.admit("alice"); !ok {
		t.Fatal("another principal's denial was held back by mallory's flood")
	}
	now = now.Add(time.Second / auditDenialsPerSecond)
	ok, held := r.admit("mallory")
	if !ok || held != 50 {
		t.Fatalf("after a ration's interval: logged %v, reporting %d held back; want true and 50", ok, held)
	}
	if ok, _ := r.admit("mallory"); ok {
		t.Fatal("a second line within the same interval")
	}
	now = now.Add(time.Hour)
	for range auditDenialBurst {
		if ok, _ := r.admit("mallory"); !ok {
			t.Fatal("an idle hour did not refill the burst")
		}
	}
	if ok, _ := r.admit("mallory"); ok {
		t.Fatal("an idle hour saved more than the burst")
	}
}

// The ration forgets idle principals rather than growing without bound.
func TestAuditRationForgetsIdlePrincipals(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newAuditRation(func() time.Time { return now })
	for i := range auditPrincipals + 10 {
		r.admit(string(rune('a'+i%26)) + string(rune(i)))
	}
	if n := len(r.principals); n > auditPrincipals {
		t.Fatalf("%d principals tracked, bound %d", n, auditPrincipals)
	}
}
