package fault

// A Set is the hooks of both engines (csf.Hooks and crf.Hooks): each method below bends the
// decision its fault names, so that planting a fault is passing the Set to csf.WithHooks or
// crf.WithHooks. The engines never name a fault; this is the one place that maps them.

// SkewCoefficients plants WrongCoefficient.
func (s Set) SkewCoefficients() bool { return s.Has(WrongCoefficient) }

// AnswerBeyondX plants RepairAboveX.
func (s Set) AnswerBeyondX() bool { return s.Has(RepairAboveX) }

// AnswerAnySource plants AnswerRequestSource.
func (s Set) AnswerAnySource() bool { return s.Has(AnswerRequestSource) }

// AnswerWithinSRTT plants RequestEverySRTT.
func (s Set) AnswerWithinSRTT() bool { return s.Has(RequestEverySRTT) }

// RetransmitOverBlock plants CodedRetxWholeBlock.
func (s Set) RetransmitOverBlock() bool { return s.Has(CodedRetxWholeBlock) }

// HelloWithoutBackoff plants NoHelloBackoff.
func (s Set) HelloWithoutBackoff() bool { return s.Has(NoHelloBackoff) }

// FixedNonce plants FixedFlowNonce.
func (s Set) FixedNonce() bool { return s.Has(FixedFlowNonce) }

// ApplyParamsEarly plants EarlyParams.
func (s Set) ApplyParamsEarly() bool { return s.Has(EarlyParams) }

// RetryParamsForever plants ParamRetryForever.
func (s Set) RetryParamsForever() bool { return s.Has(ParamRetryForever) }

// KeepBreakerTripped plants BreakerNeverResumes.
func (s Set) KeepBreakerTripped() bool { return s.Has(BreakerNeverResumes) }

// PathReportAnySource plants PathReportAnySource.
func (s Set) PathReportAnySource() bool { return s.Has(PathReportAnySource) }

// HonourSpoofedClose plants SpoofedCloseHonoured, in either engine.
func (s Set) HonourSpoofedClose() bool { return s.Has(SpoofedCloseHonoured) }

// PadHelloAck plants HelloAckLarger.
func (s Set) PadHelloAck() bool { return s.Has(HelloAckLarger) }

// OwnLimits plants LimitsNotMinimum.
func (s Set) OwnLimits() bool { return s.Has(LimitsNotMinimum) }

// RareLossReports plants LossReportRare.
func (s Set) RareLossReports() bool { return s.Has(LossReportRare) }

// HideLosses plants LossReportMiscount.
func (s Set) HideLosses() bool { return s.Has(LossReportMiscount) }

// AcceptMalformedRepair plants AcceptMalformed.
func (s Set) AcceptMalformedRepair() bool { return s.Has(AcceptMalformed) }
