package cmdutil

import (
	"fmt"

	lockv1 "github.com/lockd-dev/lockd/proto/lock/v1"
)

// TokenView is a fencing token as lockctl prints it. Value is a decimal
// string in json and yaml: it does not fit a JSON number.
type TokenView struct {
	Value    uint64 `json:"value,string"`
	Epoch    uint32 `json:"epoch"`
	Revision int64  `json:"revision"`
}

// NewTokenView converts a token; nil stays nil (lockd showed none).
func NewTokenView(t *lockv1.Token) *TokenView {
	if t == nil {
		return nil
	}
	return &TokenView{Value: t.GetValue(), Epoch: t.GetEpoch(), Revision: t.GetRevision()}
}

func (t *TokenView) String() string {
	return fmt.Sprintf("%d (epoch %d, revision %d)", t.Value, t.Epoch, t.Revision)
}
