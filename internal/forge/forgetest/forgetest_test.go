package forgetest_test

import (
	"testing"
	"time"

	"github.com/lockd-dev/lockd/internal/forge/forgetest"
)

func TestStart(t *testing.T) {
	start := time.Now()
	g := forgetest.Start(t)
	t.Logf("Gitea at %s ready in %v", g.URL, time.Since(start).Round(time.Millisecond))
	for _, u := range []forgetest.User{g.Admin, g.Author} {
		me, _, err := g.Client(t, u).GetMyUserInfo()
		if err != nil {
			t.Fatalf("%s's token: %v", u.Name, err)
		}
		if me.UserName != u.Name || me.IsAdmin != (u == g.Admin) {
			t.Fatalf("token of %s is %s (admin %v)", u.Name, me.UserName, me.IsAdmin)
		}
	}
}
