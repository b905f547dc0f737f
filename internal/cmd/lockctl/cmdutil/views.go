package cmdutil

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Time converts a proto timestamp; nil is the zero time.
func Time(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime().UTC()
}

// TimePtr converts a proto timestamp; nil stays nil (omitted in json).
func TimePtr(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime().UTC()
	return &t
}

// Seconds converts a proto duration to seconds.
func Seconds(d *durationpb.Duration) float64 { return d.AsDuration().Seconds() }

// Duration converts fractional seconds back for tables.
func Duration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// YesNo renders a bool for a table.
func YesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
